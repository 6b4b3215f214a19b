package handlers_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/audittest"
	"github.com/idem-data/idem/strategies"
)

// row is one source/target row as readers see it.
type row struct {
	Partition string
	Amount    string
	Note      string
	Version   int64
}

// model is the simple reference a strategy must agree with: what readers
// should see after a sequence of loads, computed in Go from the staging rows
// at the time of each successful load.
type model struct {
	strategy  string
	visible   map[int64]row
	succeeded map[string]bool // partition|run_id
}

func (m *model) apply(partition string, src map[int64]row) {
	switch m.strategy {
	case "delete_insert":
		maps.DeleteFunc(m.visible, func(_ int64, r row) bool { return r.Partition == partition })
		maps.Copy(m.visible, src)
	case "merge":
		for id, r := range src {
			if old, ok := m.visible[id]; !ok || r.Version >= old.Version {
				m.visible[id] = r
			}
		}
	case "append_dedupe":
		maps.Copy(m.visible, src)
	}
}

func readRows(t *rapid.T, e *env, query string, args ...any) map[int64]row {
	rows, err := e.db.Pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	out := map[int64]row{}
	var id int64
	var r row
	_, err = pgx.ForEachRow(rows, []any{&id, &r.Partition, &r.Amount, &r.Note, &r.Version}, func() error {
		out[id] = r
		return nil
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

const rowCols = "id, event_date::text, amount::text, note, version::bigint"

// TestPropertyRandomHistories runs random sequences of loads, redeliveries,
// forced reruns, replays with new run ids, staging changes and killed
// attempts, and compares what readers see with the model after every step.
func TestPropertyRandomHistories(t *testing.T) {
	for _, name := range []string{"delete_insert", "delete_insert_partitioned", "merge", "append_dedupe"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := fixtureNamed(name)
			e := newEnv(t, f)
			partitions := []string{"2026-11-27", "2026-11-28"}
			rapid.Check(t, func(rt *rapid.T) {
				ctx := context.Background()
				e.db.Exec(t, "TRUNCATE staging.src, "+f.raw+", idem.outbox, idem.run_ledger, idem.pipeline_audit")
				m := &model{strategy: f.strategy, visible: map[int64]row{}, succeeded: map[string]bool{}}
				runs := 0
				steps := rapid.IntRange(5, 30).Draw(rt, "steps")
				for range steps {
					pi := rapid.IntRange(0, len(partitions)-1).Draw(rt, "partition")
					p := partitions[pi]
					switch op := rapid.SampledFrom([]string{"stage", "load", "redeliver", "force", "kill"}).Draw(rt, "op"); op {
					case "stage":
						n := rapid.IntRange(0, 6).Draw(rt, "rows")
						// Versions are drawn at random so stale replays are common.
						ver := rapid.IntRange(1, 4).Draw(rt, "version")
						e.stage(p, 1000*(pi+1)+rapid.IntRange(0, 3).Draw(rt, "shift"), n, rapid.IntRange(0, 50).Draw(rt, "salt"), ver)
					case "load", "redeliver", "force":
						runID := fmt.Sprintf("run-%d", runs)
						if op == "load" {
							runs++
						} else if runs > 0 {
							runID = fmt.Sprintf("run-%d", rapid.IntRange(0, runs-1).Draw(rt, "old run"))
						}
						force := op == "force"
						src := readRows(rt, e, "SELECT "+rowCols+" FROM staging.src WHERE event_date = $1", p)
						out, err := e.load(p, runID, force)
						key := p + "|" + runID
						switch {
						case m.succeeded[key] && !force:
							require.NoError(rt, err)
							require.Equal(rt, audit.StatusSkipped, out.Status, "redelivery of a succeeded run must be skipped")
						case len(src) == 0:
							require.ErrorIs(rt, err, strategies.ErrEmptySource)
						default:
							require.NoError(rt, err)
							require.Equal(rt, audit.StatusSuccess, out.Status)
							m.apply(p, src)
							m.succeeded[key] = true
						}
					case "kill":
						killedAttempt(rt, e, p, fmt.Sprintf("killed-%d", runs))
					}
					got := readRows(rt, e, "SELECT "+rowCols+" FROM ("+f.visible+") v")
					require.Equal(rt, m.visible, got, "readers see something the model does not")
				}
				require.EqualValues(rt, len(m.succeeded), e.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
				_ = ctx
			})
		})
	}
}

// killedAttempt runs a load up to the moment before COMMIT and then has the
// server kill its backend, as a crash of idem or of the connection would.
func killedAttempt(t *rapid.T, e *env, partition, runID string) {
	ctx := context.Background()
	conn, err := e.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = audittest.Start(ctx, conn, audit.Attempt{RunKey: audit.RunKey{Pipeline: "test", Dataset: "ds", Partition: partition, RunID: runID}})
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, _ = strategies.Load(ctx, tx, e.ds.Strategy, strategies.Params{Partition: partition, RunID: runID})
	e.db.Exec(e.t, "SELECT pg_terminate_backend($1)", conn.Conn().PgConn().PID())
	require.Error(t, tx.Commit(ctx), "commit after the backend was killed must fail")
	_ = handlers.IsFatal
}
