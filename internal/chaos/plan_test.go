package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A seed names one workload and one fault schedule: the same seed gives the
// same intentions, another seed others.
func TestSeedDecidesWorkloadAndSchedule(t *testing.T) {
	o := Options{Seed: 42, Events: 500, Duration: time.Minute}.WithDefaults()
	summary := func(seed int64) string {
		o := o
		o.Seed = seed
		pl := makePlan(o, rand.New(rand.NewPCG(uint64(seed), 1)))
		s := ""
		for _, it := range pl.items {
			if it.cp != nil {
				s += fmt.Sprintf("%s|%s|%s|%v|%v;", it.at, it.cp.ev.subject, it.cp.ev.body, it.cp.msgID, it.cp.late)
			} else {
				s += fmt.Sprintf("%s|mut %s %d %v;", it.at, it.mut.ds.name, it.mut.p, it.mut.insert)
			}
		}
		for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(seed), 2))) {
			s += fmt.Sprintf("%s %s %d %s %d;", f.At, f.Kind, f.Replica, f.Hold, f.Param)
		}
		return s
	}
	require.Equal(t, summary(42), summary(42))
	require.NotEqual(t, summary(42), summary(43))

	pl := makePlan(o, rand.New(rand.NewPCG(42, 1)))
	kinds := map[string]bool{}
	for _, ev := range pl.events {
		kinds[ev.fatal] = true
		require.LessOrEqual(t, len(ev.copies), 3)
		for _, cp := range ev.copies {
			require.LessOrEqual(t, cp.at, o.Duration, "a copy planned after the fault phase")
		}
	}
	require.True(t, kinds[""] && kinds["empty_partition"], "valid events and empty partitions in 500 events: %v", kinds)
	faults := map[string]int{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(42, 2))) {
		faults[f.Kind]++
		if f.Kind == FaultPause {
			require.Greater(t, f.Hold, o.AckWait, "a pause must outlast the ack wait")
		}
	}
	require.GreaterOrEqual(t, len(faults), 5, "a minute of faults draws most kinds: %v", faults)
}

// checkRuns must see a lost event, a run loaded twice, a fatal input missing
// from the dead-letter stream and one dead-lettered for the wrong reason.
func TestCheckRunsSeesLostDoubledAndMisfiledEvents(t *testing.T) {
	ctx := context.Background()
	db := checkerDB(t)
	nb, err := startNATS(filepath.Join(t.TempDir(), "js"))
	require.NoError(t, err)
	t.Cleanup(nb.down)
	nc, err := nats.Connect(nb.url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: dlqStream, Subjects: []string{"idem.dlq.>"}})
	require.NoError(t, err)

	now := time.Now()
	mk := func(idx int, runID, fatal string) *event {
		ev := &event{idx: idx, dataset: "replace", partition: "2026-01-01", runID: runID, fatal: fatal, want: "invalid event"}
		ev.copies = []*pubCopy{{ev: ev, acked: true, seq: uint64(idx + 1), sentAt: now}}
		return ev
	}
	fine, lost, twice := mk(0, "fine", ""), mk(1, "lost", ""), mk(2, "twice", "")
	missing, filed, misfiled := mk(3, "bad-missing", "wrong_type"), mk(4, "bad-filed", "wrong_type"), mk(5, "bad-misfiled", "wrong_type")
	_, err = db.Exec(ctx, `
WITH a AS (INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
           VALUES ('chaos', 'replace', '2026-01-01', 'fine', 'success', 1, now()),
                  ('chaos', 'replace', '2026-01-01', 'twice', 'success', 1, now()),
                  ('chaos', 'replace', '2026-01-01', 'twice', 'success', 2, now())
           RETURNING id, run_id, attempt)
INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
SELECT 'chaos', 'replace', '2026-01-01', run_id, id FROM a WHERE attempt = 1`)
	require.NoError(t, err)
	for _, dl := range []struct {
		ev   *event
		kind string
	}{{filed, "fatal"}, {misfiled, "exhausted"}} {
		m := nats.NewMsg("idem.dlq.replace")
		m.Header.Set(chaosIDHeader, dl.ev.copies[0].chaosID())
		m.Header.Set("Idem-Error-Kind", dl.kind)
		m.Header.Set("Idem-Error", "invalid event: partition: want a string")
		m.Header.Set("Idem-Deliveries", "1")
		m.Header.Set("Idem-Failed-At", now.UTC().Format(time.RFC3339Nano))
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}

	r := &Report{}
	h := history{events: []*event{fine, lost, twice, missing, filed, misfiled}}
	require.NoError(t, checkRuns(ctx, db, js, h, time.Second, r))
	c := r.Check
	require.Equal(t, 3, c.ValidEvents)
	require.Equal(t, 1, c.SucceededOnce, "fine")
	require.Equal(t, 1, c.UnaccountedEvents, "lost")
	require.Equal(t, 1, c.SuccessNotOne, "twice")
	require.Equal(t, 3, c.FatalInputs)
	require.Equal(t, 1, c.FatalMissing)
	require.Equal(t, 2, c.FatalDeadLettered)
	require.Equal(t, 1, c.FatalWrongReason)
	require.False(t, c.DLQCorrect)
	// The append rows of checkerDB's hand load are in the ledger but were
	// never published here: unexpected.
	require.Positive(t, c.UnexpectedLedger)
	require.Len(t, r.Violations, 1+1+1+1+c.UnexpectedLedger)
}
