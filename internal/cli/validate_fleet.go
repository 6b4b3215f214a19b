package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/natsconn"
)

// datasetDefinitions is what each replica reports of its datasets to the
// fleet: each one as JSON keyed by its YAML field names, so that a diff
// names fields as the config file does ("source", "retries").
func datasetDefinitions(cfg *config.Config) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(cfg.Datasets))
	for name, ds := range cfg.Datasets {
		y, err := yaml.Marshal(ds)
		if err != nil {
			continue
		}
		var fields map[string]any
		if err := yaml.Unmarshal(y, &fields); err != nil {
			continue
		}
		if b, err := json.Marshal(fields); err == nil {
			out[name] = b
		}
	}
	return out
}

// definitionsDiff is what a new config changes against a running one.
type definitionsDiff struct {
	Added   []string
	Removed []string
	// Changed maps a dataset in both to the fields whose values differ.
	Changed map[string][]string
}

func (d definitionsDiff) empty() bool {
	return len(d.Added) == 0 && len(d.Removed) == 0 && len(d.Changed) == 0
}

// diffDefinitions compares the datasets a replica runs with those of a new
// config, field by field. A running dataset without a definition (a replica
// of an older idem) is compared by name only.
func diffDefinitions(running, next map[string]json.RawMessage) definitionsDiff {
	d := definitionsDiff{Changed: map[string][]string{}}
	for _, name := range slices.Sorted(maps.Keys(next)) {
		old, ok := running[name]
		if !ok {
			d.Added = append(d.Added, name)
			continue
		}
		if old == nil {
			continue
		}
		if fields := changedFields(old, next[name]); len(fields) > 0 {
			d.Changed[name] = fields
		}
	}
	for _, name := range slices.Sorted(maps.Keys(running)) {
		if _, ok := next[name]; !ok {
			d.Removed = append(d.Removed, name)
		}
	}
	return d
}

// changedFields lists, sorted, the top-level keys whose values differ
// between two JSON objects, a key missing on one side included.
func changedFields(a, b json.RawMessage) []string {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		if bytes.Equal(a, b) {
			return nil
		}
		return []string{"(definition)"}
	}
	var out []string
	for k, va := range ma {
		if vb, ok := mb[k]; !ok || !jsonEqual(va, vb) {
			out = append(out, k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func jsonEqual(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	ca, _ := json.Marshal(va) // maps marshal with sorted keys
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

// fleetVersion is one config version the fleet runs and the replicas
// running it.
type fleetVersion struct {
	Version  string
	Replicas []string
	Running  map[string]json.RawMessage
}

// groupFleet groups the live members by version, sorted by version. The
// datasets of a version are those of its first replica: one version, one
// set of definitions.
func groupFleet(members []consumer.Member) []fleetVersion {
	byVersion := map[string]*fleetVersion{}
	for _, m := range members {
		v := byVersion[m.Version]
		if v == nil {
			running := make(map[string]json.RawMessage, len(m.Datasets))
			for _, name := range m.Datasets {
				running[name] = m.Definitions[name]
			}
			v = &fleetVersion{Version: m.Version, Running: running}
			byVersion[m.Version] = v
		}
		v.Replicas = append(v.Replicas, m.Replica)
	}
	out := make([]fleetVersion, 0, len(byVersion))
	for _, k := range slices.Sorted(maps.Keys(byVersion)) {
		out = append(out, *byVersion[k])
	}
	return out
}

// validateFleet prints, per config version the live replicas run, what cfg
// changes against it. A difference is information, never a failure.
func (e *env) validateFleet(ctx context.Context, cfg *config.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, err := natsconn.Connect(ctx, cfg.NATS, "idem validate", zerolog.Nop())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	bucket := cfg.NATS.FleetBucketName()
	members, err := consumer.ReadFleet(ctx, js, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		members, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("fleet bucket %s: %w", bucket, err)
	}
	printFleetDiff(e.out, bucket, configVersion(cfg), datasetDefinitions(cfg), groupFleet(members))
	return nil
}

func printFleetDiff(w io.Writer, bucket, newVersion string, next map[string]json.RawMessage, versions []fleetVersion) {
	if len(versions) == 0 {
		fmt.Fprintf(w, "fleet %s: no live replica; nothing to compare with\n", bucket)
		return
	}
	for _, v := range versions {
		fmt.Fprintf(w, "version %s: %d replica(s): %s\n", v.Version, len(v.Replicas), strings.Join(v.Replicas, ", "))
		if v.Version == newVersion {
			fmt.Fprintln(w, "  same as the new config: no change")
			continue
		}
		d := diffDefinitions(v.Running, next)
		if len(d.Added) > 0 {
			fmt.Fprintf(w, "  added: %s\n", strings.Join(d.Added, ", "))
		}
		if len(d.Removed) > 0 {
			fmt.Fprintf(w, "  removed: %s\n", strings.Join(d.Removed, ", "))
		}
		for _, name := range slices.Sorted(maps.Keys(d.Changed)) {
			fmt.Fprintf(w, "  %s: %s changed\n", name, strings.Join(d.Changed[name], ", "))
		}
		if d.empty() {
			fmt.Fprintln(w, "  no dataset changed")
		}
		for name, def := range v.Running {
			if def == nil && next[name] != nil {
				fmt.Fprintln(w, "  these replicas do not report definitions (older idem): datasets compared by name only")
				break
			}
		}
	}
}
