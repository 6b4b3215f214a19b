package statuspage

// GET /partition: a cell's story (internal/why), its verdict and next
// command, its colour by the grid's rule, and, with a token, the buttons
// its verdict calls for. The page's script polls it to follow a partition
// after an action.

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/backfill"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/why"
)

type partitionView struct {
	Dataset, Partition string
	Story              why.Report
	// Status is the cell's colour, as the grid decides it.
	Status Status
	// Final: the verdict will not change by itself (loaded, or failed for
	// good: rejected, dead-lettered).
	Final bool
	// Latest is the newest attempt's audit id (0 before any): the script
	// knows an action took effect once a newer attempt is final.
	Latest int64
	// The buttons the verdict calls for, when actions are enabled.
	ReplaySeq uint64 // the dead letter to replay; 0: none
	CanReload bool
	// CanRestore, CanRetract: the buttons of actions_versions.go.
	CanRestore, CanRetract bool
	Backfill               *keyRange
}

// keyRange is a range of partitions, from..to inclusive.
type keyRange struct{ From, To string }

func (p *Page) partition(w http.ResponseWriter, r *http.Request) {
	ctx, q := r.Context(), r.URL.Query()
	name, raw := q.Get("dataset"), q.Get("partition")
	if name == "" || raw == "" {
		http.Error(w, "want ?dataset=...&partition=...", http.StatusBadRequest)
		return
	}
	dss := p.d.Datasets()
	ds, ok := p.dataset(name)
	if !ok {
		http.Error(w, "dataset "+clip(name)+" is not configured", http.StatusNotFound)
		return
	}
	key, err := parseKey(ds, "partition", raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if p.d.Why == nil {
		http.Error(w, "this idem tells no stories", http.StatusServiceUnavailable)
		return
	}
	st, err := p.d.Why(ctx, ds.Name, key.Key)
	if err != nil {
		p.fail(w, err)
		return
	}
	cells, err := p.read(ctx, dss, ds, []string{key.Key})
	if err != nil {
		p.fail(w, err)
		return
	}
	// Exit 0 is done, 1 failed for good (why.Exit): nothing changes the
	// verdict until someone acts.
	v := partitionView{Dataset: ds.Name, Partition: key.Key, Story: st, Status: cells[0].Status, Final: st.Verdict.Exit <= 1}
	if len(st.Attempts) > 0 {
		v.Latest = st.Attempts[0].ID
	}
	if p.d.Token != "" {
		if err := p.buttons(ctx, ds, &v); err != nil {
			p.fail(w, err)
			return
		}
	}
	p.render(w, "partition.html", v)
}

// buttons chooses the actions the verdict calls for: a dead letter is
// replayed; a partition that loaded, was refused or failed is reloaded (a
// forced run), and so is a cancelled one; a missing one is backfilled
// with the gap around it.
func (p *Page) buttons(ctx context.Context, ds Dataset, v *partitionView) error {
	p.versionButtons(ctx, v)
	switch st := v.Story.Verdict.State; st {
	case why.StateDeadLettered, why.StateLoaded, why.StateOutdated, why.StateRejected, why.StateRetrying, why.StateCancelled:
		v.CanReload = true
		if st == why.StateDeadLettered && len(v.Story.DeadLetters) > 0 {
			v.ReplaySeq = v.Story.DeadLetters[0].Seq // the one the verdict names
		}
	case why.StateMissing:
		if _, ok := backfill.StepOf(partitionType(ds)); !ok {
			return nil // a backfill cannot enumerate text partitions
		}
		from, to, err := p.missingRange(ctx, ds, v.Partition)
		if err != nil {
			return err
		}
		v.Backfill = &keyRange{from, to}
	}
	return nil
}

// missingRange is the run of ds's expected partitions around key that have
// no successful load, at most MaxRange of them: the gap a backfill of key
// fills. Without a calendar, or for a partition it does not expect yet, it
// is key alone.
func (p *Page) missingRange(ctx context.Context, ds Dataset, key string) (string, string, error) {
	if ds.Calendar == nil {
		return key, key, nil
	}
	slots := ds.Calendar.Ended(p.d.Now(), "", "")
	i := slices.IndexFunc(slots, func(s calendar.Slot) bool { return s.Key == key })
	if i < 0 {
		return key, key, nil
	}
	lo, hi := max(0, i-MaxRange/2), min(len(slots), i+MaxRange/2)
	loaded, err := audit.LoadedPartitions(ctx, p.d.DB, p.d.Pipeline, ds.Name, slots[lo].Key, slots[hi-1].Key)
	if err != nil {
		return "", "", err
	}
	a, b := i, i
	for a > lo && !loaded[slots[a-1].Key] {
		a--
	}
	for b < hi-1 && !loaded[slots[b+1].Key] {
		b++
	}
	return slots[a].Key, slots[b].Key, nil
}

// stamp is a time as the story writes it: UTC, to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func stampOf(t *time.Time) string {
	if t == nil {
		return ""
	}
	return stamp(*t)
}
