package backfill

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
)

// StatusOutdated is a partition the plan of --reprocess outdated finds
// loaded under another definition than the dataset's current one.
const StatusOutdated = "outdated"

// UnknownDefinition is why a partition loaded before idem recorded
// definitions is outdated.
const UnknownDefinition = "definition unknown (loaded before definitions were recorded)"

// OutdatedPartition is a partition whose latest successful load ran
// another definition than the dataset's current one.
type OutdatedPartition struct {
	Partition string    `json:"partition"`
	RunID     string    `json:"run_id"`
	LoadedAt  time.Time `json:"loaded_at"`
	AuditID   int64     `json:"audit_id"`
	// Definition is the hash of the definition the load ran; "" when it
	// ran before idem recorded definitions.
	Definition string `json:"definition"`
	// Changed names the fields that differ from the current definition
	// (source, checks, …); empty when the old definition is not known.
	Changed []string `json:"changed"`
	Reason  string   `json:"reason"`
}

// Known reports whether the definition the partition was loaded under is
// known (recorded), so that it differs for sure.
func (o OutdatedPartition) Known() bool { return o.Definition != "" }

// OutdatedReport is every outdated partition of a dataset in a range.
type OutdatedReport struct {
	Dataset string `json:"dataset"`
	// Definition is the current definition's hash.
	Definition string `json:"definition"`
	From       string `json:"from,omitempty"`
	To         string `json:"to,omitempty"`
	// Loaded counts the partitions with a successful load in the range.
	Loaded   int                 `json:"loaded"`
	Outdated []OutdatedPartition `json:"outdated"`
}

// Changes is "source, checks changed", or why it is not known.
func Changes(fields []string) string {
	if len(fields) == 0 {
		return "the definition changed"
	}
	return strings.Join(fields, ", ") + " changed"
}

// FindOutdated lists the partitions of dataset with a key from..to ("":
// open) whose latest successful load ran another definition than cfg's,
// with what changed, from the definitions recorded in idem.definitions.
// It reads each partition's latest success by the partition index
// (audit.LatestSuccesses).
func FindOutdated(ctx context.Context, db audit.Querier, cfg *config.Config, dataset, from, to string) (*OutdatedReport, error) {
	d, ok := cfg.Datasets[dataset]
	if !ok {
		return nil, fmt.Errorf("dataset %q is not configured", dataset)
	}
	cur, curDef := d.DefinitionHash(), d.Definition()
	loads, err := audit.LatestSuccesses(ctx, db, cfg.Pipeline, dataset, from, to)
	if err != nil {
		return nil, err
	}
	rep := &OutdatedReport{Dataset: dataset, Definition: cur, From: from, To: to, Loaded: len(loads), Outdated: []OutdatedPartition{}}
	var hashes []string
	for _, l := range loads {
		if audit.Outdated(l.Definition, cur) && l.Definition != nil && !slices.Contains(hashes, *l.Definition) {
			hashes = append(hashes, *l.Definition)
		}
	}
	defs, err := audit.DefinitionsOf(ctx, db, cfg.Pipeline, dataset, hashes)
	if err != nil {
		return nil, err
	}
	changed := map[string][]string{}
	for h, def := range defs {
		changed[h] = config.DefinitionChanges(def, curDef)
	}
	for _, l := range loads {
		// A load from before definitions were recorded is listed too:
		// what it ran is not known.
		if !audit.Outdated(l.Definition, cur) && (l.Definition != nil || cur == "") {
			continue
		}
		o := OutdatedPartition{Partition: l.Partition, RunID: l.RunID, LoadedAt: l.FinishedAt, AuditID: l.AuditID, Changed: []string{}}
		switch {
		case l.Definition == nil:
			o.Reason = UnknownDefinition
		case changed[*l.Definition] != nil:
			o.Definition, o.Changed = *l.Definition, changed[*l.Definition]
			o.Reason = "loaded under an older definition (" + Changes(o.Changed) + ")"
		default:
			o.Definition = *l.Definition
			o.Reason = "loaded under definition " + o.Definition + ", which idem.definitions does not hold"
		}
		rep.Outdated = append(rep.Outdated, o)
	}
	return rep, nil
}

// outdatedIn reads which of keys (canonical, in any order) are outdated.
func outdatedIn(ctx context.Context, db audit.Querier, cfg *config.Config, dataset string, keys []string) (map[string]OutdatedPartition, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	lo, hi := slices.Min(keys), slices.Max(keys)
	rep, err := FindOutdated(ctx, db, cfg, dataset, lo, hi)
	if err != nil {
		return nil, err
	}
	out := make(map[string]OutdatedPartition, len(rep.Outdated))
	for _, o := range rep.Outdated {
		out[o.Partition] = o
	}
	return out, nil
}

// FleetAgrees reports whether every member of the fleet runs dataset with
// the definition hash want: none of them an older or newer one, none
// without the dataset or too old to report definitions. members are the
// live ones, as consumer.ReadFleet judges them by the NATS server's clock.
// No member is no agreement.
func FleetAgrees(members []consumer.Member, dataset, want string) bool {
	live := 0
	for _, m := range members {
		live++
		fields, ok := m.Definitions[dataset]
		if !ok {
			return false
		}
		def, ok := config.DefinitionOf(fields)
		if !ok || config.HashDefinition(def) != want {
			return false
		}
	}
	return live > 0
}

// RepublishAfter is how long the automatic reload of one definition waits
// before it publishes again what is still outdated (loads that failed, or
// events still queued, which the ledger then skips): once per
// RepublishAfter across the fleet, whichever replica passes.
const RepublishAfter = time.Hour

// OutdatedRunID is the run id of the automatic reload of a dataset's
// outdated partitions under definition hash: the same on every replica, so
// that their publishes of one partition share a Nats-Msg-Id.
func OutdatedRunID(hash string) string { return "outdated__" + hash }

// AutoReload is what one pass of on_definition_change: reload did.
type AutoReload struct {
	// Agreed: every live replica runs the current definition.
	Agreed bool
	// Outdated counts the partitions loaded under another known definition.
	Outdated int
	// Unknown counts those loaded before definitions were recorded: left
	// to `idem backfill --reprocess outdated`.
	Unknown int
	// Reloaded counts those already loaded by this definition's run once,
	// that another definition loaded since: left to a backfill too.
	Reloaded int
	// Published counts the events published (duplicates included).
	Published, Duplicates int
	RunID                 string
	// Recent: this definition's reload was published less than
	// RepublishAfter ago; nothing was published.
	Recent bool
}

// ReloadOutdated is one pass of on_definition_change: reload for dataset:
// when every live member of the fleet runs the current definition, it
// publishes one event per partition loaded under another known
// definition, at most MaxPartitions, under OutdatedRunID (not forced: the
// ledger skips what this run already loaded), at most once per
// RepublishAfter (a lease that is never given back). db must be a pool,
// not a transaction. Partitions loaded before
// definitions were recorded, or already loaded once by this run (the
// definition came back), are counted and left to an operator's backfill.
func ReloadOutdated(ctx context.Context, db audit.Querier, js jetstream.JetStream, cfg *config.Config, dataset string, members []consumer.Member) (AutoReload, error) {
	d, ok := cfg.Datasets[dataset]
	if !ok {
		return AutoReload{}, fmt.Errorf("dataset %q is not configured", dataset)
	}
	hash := d.DefinitionHash()
	r := AutoReload{RunID: OutdatedRunID(hash)}
	if r.Agreed = FleetAgrees(members, dataset, hash); !r.Agreed {
		return r, nil
	}
	rep, err := FindOutdated(ctx, db, cfg, dataset, "", "")
	if err != nil {
		return r, err
	}
	var keys []string
	for _, o := range rep.Outdated {
		if !o.Known() {
			r.Unknown++
			continue
		}
		r.Outdated++
		keys = append(keys, o.Partition)
	}
	if len(keys) > MaxPartitions {
		keys = keys[:MaxPartitions]
	}
	done, err := audit.RunLoadedIn(ctx, db, cfg.Pipeline, dataset, r.RunID, keys)
	if err != nil {
		return r, err
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return done[k] })
	r.Reloaded = len(done)
	if len(keys) == 0 {
		return r, nil
	}
	// Taken only when there is something to publish; never given back: it
	// expires.
	_, ok, err = audit.TryLease(ctx, db, "outdated:"+dataset+":"+hash, RepublishAfter)
	if err != nil || !ok {
		r.Recent = err == nil
		return r, err
	}
	res := &Result{Dataset: dataset, Reprocess: Reprocess{Outdated: true}.String(), RunID: r.RunID, Planned: len(keys)}
	if err := Plan(ctx, db, cfg, res, keys, Reprocess{Outdated: true}); err != nil {
		return r, err
	}
	if res.ToPublish == 0 {
		return r, nil
	}
	err = Publish(ctx, js, cfg, res, 0, func(int) {})
	r.Published, r.Duplicates = res.Published, res.Duplicates
	return r, err
}
