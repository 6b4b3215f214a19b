package handlers_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
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
	t.Parallel()
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

// TestPropertyRandomGroupHistories is the same for group loads: random
// groups of 1, 2, 8 or 32 events (distinct partitions, new runs,
// redeliveries of old ones, forced reruns, empty partitions among them)
// loaded by HandleGroup, compared with the model after every step. Each
// member must end as it would alone.
func TestPropertyRandomGroupHistories(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"delete_insert", "delete_insert_partitioned", "append_dedupe"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := fixtureNamed(name)
			e := newEnv(t, f)
			var partitions []string
			for d := range 32 {
				partitions = append(partitions, time.Date(2026, 11, 1+d, 0, 0, 0, 0, time.UTC).Format(time.DateOnly))
			}
			rapid.Check(t, func(rt *rapid.T) {
				ctx := context.Background()
				e.db.Exec(t, "TRUNCATE staging.src, "+f.raw+", idem.outbox, idem.run_ledger, idem.pipeline_audit")
				m := &model{strategy: f.strategy, visible: map[int64]row{}, succeeded: map[string]bool{}}
				runs := 0
				seq := uint64(0) // stream sequences, unique as JetStream's are
				steps := rapid.IntRange(3, 12).Draw(rt, "steps")
				for range steps {
					if rapid.Bool().Draw(rt, "stage") {
						for range rapid.IntRange(1, 8).Draw(rt, "partitions staged") {
							pi := rapid.IntRange(0, len(partitions)-1).Draw(rt, "partition")
							n := rapid.SampledFrom([]int{0, 1, 3, 6}).Draw(rt, "rows")
							e.stage(partitions[pi], 1000*(pi+1), n, rapid.IntRange(0, 50).Draw(rt, "salt"), 1)
						}
						continue
					}
					size := rapid.SampledFrom([]int{1, 2, 8, 32}).Draw(rt, "group size")
					picked := rapid.Permutation(partitions).Draw(rt, "order")[:size]
					var evs []schemas.Event
					var ms []handlers.Meta
					type want struct {
						key   string
						src   map[int64]row
						force bool
						p     string
					}
					var wants []want
					for _, p := range picked {
						runID := fmt.Sprintf("run-%d", runs)
						force := false
						switch op := rapid.SampledFrom([]string{"new", "redeliver", "force"}).Draw(rt, "op"); {
						case op == "new" || runs == 0:
							runs++
						default:
							runID = fmt.Sprintf("run-%d", rapid.IntRange(0, runs-1).Draw(rt, "old run"))
							force = op == "force"
						}
						body, err := schemas.PartitionReady{Dataset: "ds", Partition: p, RunID: runID, Force: force}.Marshal()
						require.NoError(rt, err)
						ev, err := schemas.Decode("idem.ready.ds", body, e.h.Lookup)
						require.NoError(rt, err)
						evs = append(evs, ev)
						seq++
						ms = append(ms, handlers.Meta{StreamSeq: seq})
						wants = append(wants, want{key: p + "|" + runID, force: force, p: p,
							src: readRows(rt, e, "SELECT "+rowCols+" FROM staging.src WHERE event_date = $1", p)})
					}
					outs, errs := e.h.HandleGroup(ctx, evs, ms)
					for i, w := range wants {
						switch {
						case m.succeeded[w.key] && !w.force:
							require.NoError(rt, errs[i])
							require.Equal(rt, audit.StatusSkipped, outs[i].Status, "redelivery of a succeeded run must be skipped")
						case len(w.src) == 0:
							require.ErrorIs(rt, errs[i], strategies.ErrEmptySource)
						default:
							require.NoError(rt, errs[i])
							require.Equal(rt, audit.StatusSuccess, outs[i].Status)
							m.apply(w.p, w.src)
							m.succeeded[w.key] = true
						}
					}
					got := readRows(rt, e, "SELECT "+rowCols+" FROM ("+f.visible+") v")
					require.Equal(rt, m.visible, got, "readers see something the model does not")
					require.Zero(rt, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'started'"), "an attempt left started")
				}
				require.EqualValues(rt, len(m.succeeded), e.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
			})
		})
	}
}
