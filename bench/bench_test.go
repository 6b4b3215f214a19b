package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// idemBinary builds idem once for the package's tests: a production
// build, as the harness makes (bench.Options.IdemBin).
func idemBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idem-bench-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "idem")
		root, err := moduleRoot()
		if err != nil {
			binErr = err
			return
		}
		build := exec.Command("go", "build", "-o", binPath, "./cmd/idem")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build idem: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// TestHarnessSmoke runs the whole harness at its tiny size and checks that
// every figure exists and is sane: positive, and idem never doubling a row.
// It never checks a speed: the box is shared and timings are the benchmark's
// business, not a test's.
func TestHarnessSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds idem and runs it against PostgreSQL and NATS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The lone-event phase's baseline is an idem binary too: this one,
	// which migrates a database of its own.
	bin := idemBinary(t)
	res, err := Run(ctx, Options{Mode: ModeTiny, AdminURL: pgtest.AdminURL(), Progress: testLog{t}, IdemBin: bin, BaselineBin: bin, BaselineLabel: "the same build"})
	require.NoError(t, err)
	sz := res.Sizes

	// (a) every method measured at every max_in_flight.
	require.Len(t, res.Small, len(sz.InFlight))
	for _, p := range res.Small {
		for _, name := range []string{MIdem, MHandler, MLimit, MFloor, MNaive} {
			m := p.Methods[name]
			require.NotNil(t, m, "%s at max_in_flight %d", name, p.InFlight)
			require.Greater(t, m.Throughput.PerSec, 0.0, name)
			require.NotNil(t, m.Latency, name)
			require.Greater(t, m.Latency.P50, 0.0, name)
			require.GreaterOrEqual(t, m.Latency.P99, m.Latency.P50, name)
		}
	}
	// CPU per event, by process, around the closed-loop runs: the cluster
	// is on this machine, so its postmaster is found. (A tiny run can take
	// less than the 10 ms /proc counts in: TestCPUTimes checks the counts.)
	for _, p := range res.Small {
		for _, name := range []string{MIdem, MFloor, MLimit} {
			c := p.Methods[name].CPU
			require.NotNil(t, c, "%s at max_in_flight %d: CPU measured", name, p.InFlight)
			require.GreaterOrEqual(t, min(c.Postgres, c.Idem, c.Harness), 0.0, name)
		}
	}
	// The limit is idem's captured SQL: a load has a transaction in it.
	require.NotEmpty(t, res.Steps)
	// Steps are pipelined batches: the last one ends with the COMMIT.
	var sqls []string
	for _, s := range res.Steps {
		sqls = append(sqls, s.SQL)
	}
	require.True(t, strings.HasSuffix(strings.ToUpper(sqls[len(sqls)-1]), "COMMIT"), "the captured load commits: %v", sqls)

	// (b) idem never doubles a row; the naive consumer doubles every event.
	require.Len(t, res.Duplicates, len(sz.InFlight))
	for _, d := range res.Duplicates {
		require.Zero(t, d.IdemDoubled)
		require.EqualValues(t, sz.Events, d.IdemSkipped)
		require.EqualValues(t, sz.Events*10, d.NaiveDoubled)
		require.Greater(t, d.IdemPerSec, 0.0)
		require.Greater(t, d.NaivePerSec, 0.0)
	}
	// (f) skipped duplicates.
	for _, s := range res.Skipped {
		require.Greater(t, s.Idem.Throughput.PerSec, 0.0)
		require.Greater(t, s.Limit.Throughput.PerSec, 0.0)
		require.NotNil(t, s.Idem.Latency)
	}

	// (c) one load of each kind, with its reference.
	require.Len(t, res.Big, len(sz.Big))
	for _, bs := range res.Big {
		for _, k := range []string{"floor_index", "floor_noindex", "copy_index", "copy_noindex", "part_bare_delete_parent",
			"merge_new_bare", "merge_new_idem", "merge_unchanged_bare", "merge_unchanged_idem", "merge_changed_bare", "merge_changed_idem"} {
			require.Greater(t, bs.Cases[k].Ms, 0.0, k)
			require.Greater(t, bs.Cases[k].WALBytes, int64(0), k)
		}
		for _, k := range []string{"plain", "plain_bare", "part", "part_bare", "part_bare_truncate", "append", "append_bare"} {
			require.Len(t, bs.Reruns[k], sz.Reruns, k)
			for _, op := range bs.Reruns[k] {
				require.Greater(t, op.Ms, 0.0, k)
				require.Greater(t, op.TableBytes, int64(0), k)
			}
		}
		require.Equal(t, "delete", bs.Reruns["plain"][0].Route)
		require.Equal(t, "delete_child", bs.Reruns["part"][0].Route, "the default route of a partitioned target")
		require.EqualValues(t, bs.Rows, bs.Cases["merge_new_idem"].Rows, "all new rows inserted")
		require.EqualValues(t, bs.Rows, bs.Cases["merge_changed_idem"].Rows, "all changed rows updated")
		require.Len(t, bs.View, 2)
		require.Greater(t, bs.View[1].TableRows, bs.View[0].TableRows)
	}

	// (d) and (e).
	require.Len(t, res.Backfill, len(sz.BackfillInFlight))
	for _, b := range res.Backfill {
		require.Greater(t, b.IdemSeconds, 0.0)
		require.Greater(t, b.BareSeconds, 0.0)
		require.Greater(t, b.PeakRSSMiB, 0.0)
	}
	require.NotEmpty(t, res.Memory)
	for _, m := range res.Memory {
		require.Greater(t, m.PeakMiB, 0.0, m.Phase)
	}

	// (g) every variant loaded, every check passed (checkOutcomes), the
	// statement taken apart, the small events with and without.
	c := res.Checks
	require.NotNil(t, c)
	for _, v := range checksVariants {
		require.Len(t, c.Big[v], sz.ChecksReps, v)
		for _, l := range c.Big[v] {
			require.Greater(t, l.Ms, 0.0, v)
			require.EqualValues(t, sz.ChecksRows, l.Rows, v)
			require.Equal(t, "delete", l.Route, v)
			switch v {
			case ChecksNone:
			case ChecksRowCountChange:
				// Evaluated from the DELETE's and the INSERT's row counts:
				// no statement, no time.
				require.Zero(t, l.ChecksMs, v)
			default:
				require.Greater(t, l.ChecksMs, 0.0, v)
			}
		}
	}
	require.NotNil(t, c.Dissect)
	require.Greater(t, c.Dissect.StatementMs, 0.0)
	require.Contains(t, c.Dissect.Plan, "InitPlan")
	require.Len(t, c.Dissect.Parts, 2, "the unique check's subquery and the shared scan")
	require.Len(t, c.Dissect.Alone, 2, "the same, each timed alone")
	require.Len(t, c.Small, len(sz.InFlight))
	for _, p := range c.Small {
		require.Greater(t, p.With.PerSec, 0.0)
		require.Greater(t, p.Without.PerSec, 0.0)
	}
	require.NotNil(t, c.Replay)
	require.Len(t, c.Replay.StepsWith, len(c.Replay.StepsWithout), "a row_count check reads the INSERT's count: no statement; its outcome goes with the success")

	// (i) a lone event, this binary and the baseline, every run measured.
	l := res.Lone
	require.NotNil(t, l)
	require.NotNil(t, l.Baseline)
	for _, p := range []LonePoint{l.Current, *l.Baseline} {
		require.Len(t, p.Runs50, l.Reps)
		require.Greater(t, p.P50, 0.0)
		require.GreaterOrEqual(t, p.P99, p.P50)
	}

	// (j) every statement mode, and auto through PgBouncer, ran in the
	// mode it says, at every max_in_flight and size.
	sm := res.StatementModes
	require.NotNil(t, sm)
	require.NotEmpty(t, sm.Pooler, "make test installs pgbouncer (make pgbouncer)")
	ways := []string{StmPrepare, StmDescribe, StmExec, StmPooled}
	require.Contains(t, sm.Routes[StmPooled], "transaction pooler")
	require.Contains(t, sm.Routes[StmPooled], "describe (auto)")
	require.Len(t, sm.Small, len(sz.StatementsInFlight))
	for _, p := range sm.Small {
		for _, k := range ways {
			require.NotNil(t, p.Ways[k], k)
			require.Len(t, p.Ways[k].Throughput.Runs, sz.StatementsReps, k)
			require.Greater(t, p.Ways[k].Throughput.PerSec, 0.0, k)
			require.NotNil(t, p.Ways[k].CPU, k)
		}
	}
	require.Len(t, sm.Big, len(sz.StatementsBig))
	for _, bs := range sm.Big {
		for _, k := range ways {
			require.Len(t, bs.Ways[k], sz.StatementsReps, k)
			require.Greater(t, bs.Ways[k][0].Ms, 0.0, k)
			require.EqualValues(t, bs.Rows, bs.Ways[k][0].Rows, k)
			require.Equal(t, "delete", bs.Ways[k][0].Route, k)
		}
	}

	// The report renders from the results alone, and from the saved file.
	path := filepath.Join(t.TempDir(), "results.json")
	require.NoError(t, res.Save(path))
	again, err := Load(path)
	require.NoError(t, err)
	require.Equal(t, res.Markdown(), again.Markdown())
	require.Contains(t, again.Markdown(), "(c) Big partitions")
	require.Contains(t, again.Markdown(), "(g) Checks")
	require.Contains(t, again.Markdown(), "(i) A lone event")
	require.Contains(t, again.Markdown(), "(j) Statement modes")
	require.Contains(t, again.Markdown(), "CPU per event, by process")
	require.NotEmpty(t, again.Verdicts())
	require.True(t, strings.HasPrefix(again.SVG(), "<svg"))
	doc := again.Document(nil, nil)
	require.Contains(t, doc, "## Targets")
	require.Contains(t, doc, "## Method")
	require.NotContains(t, doc, "(c) Big partitions", "the figures are in bench/FIGURES.md")
	require.Contains(t, doc, "(../bench/FIGURES.md)")
	figures := again.Figures(Chart, nil, nil)
	require.Contains(t, figures, again.Markdown())
	require.Contains(t, figures, "]("+Chart+")")

	// A report of another run takes (j) from this one, named as such.
	other := &Results{Mode: ModeTiny, Command: "idembench -mode tiny"}
	require.NoError(t, other.TakeStatements(again))
	require.Error(t, other.TakeStatements(again), "it has (j) of its own now")
	require.Contains(t, other.Figures("", nil, nil), "(j), the statement modes")
	require.Contains(t, other.Markdown(), "_These figures come from a run of their own")
}

// TestBind checks the replay rebinds the sample event's values wherever the
// handler put them.
func TestBind(t *testing.T) {
	d0 := time.Date(2000, 1, 5, 0, 0, 0, 0, time.UTC)
	tpl := &template{partition: "2000-01-05", run: "sample-run", date: d0, auditID: 900000001}
	b := binding{partition: "2001-02-03", run: "new-run", date: time.Date(2001, 2, 3, 0, 0, 0, 0, time.UTC), id: 42}
	id := int64(900000001)
	other := int64(10)
	require.Equal(t, "bench\x1fsmall\x1f2001-02-03", tpl.bind("bench\x1fsmall\x1f2000-01-05", b))
	require.Equal(t, "new-run", tpl.bind("sample-run", b))
	require.Equal(t, int64(42), tpl.bind(int64(900000001), b))
	require.Equal(t, int64(42), *tpl.bind(&id, b).(*int64))
	require.Equal(t, int64(10), *tpl.bind(&other, b).(*int64))
	require.True(t, b.date.Equal(*tpl.bind(&d0, b).(*time.Time)))
	named := tpl.bind(pgx.NamedArgs{"partition": "2000-01-05", "run_id": "sample-run", "n": 3}, b).(pgx.NamedArgs)
	require.Equal(t, pgx.NamedArgs{"partition": "2001-02-03", "run_id": "new-run", "n": 3}, named)
	require.Equal(t, true, tpl.bind(true, b))
	require.True(t, tpl.usesAuditID() == false, "no trips, no audit id")
}

func TestStats(t *testing.T) {
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	ds := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	require.Equal(t, 2.0, percentile(ds, 50))
	require.Equal(t, 4.0, percentile(ds, 99))
	require.Equal(t, "1,234,567", thousands(1234567))
	require.Equal(t, 50.0, niceStep(37))
	require.InDelta(t, 1.5, drift([]Op{{Ms: 10}, {Ms: 10}, {Ms: 99}, {Ms: 15}, {Ms: 15}}), 1e-9)
}

// TestCPUTimes checks the CPU counts the harness reads from /proc: its own
// grow with work it does, and the test cluster's postmaster, found from a
// backend, has spent some since it started.
func TestCPUTimes(t *testing.T) {
	ctx := context.Background()
	before, err := procTicks(os.Getpid(), false)
	require.NoError(t, err)
	x := 0
	for deadline := time.Now().Add(150 * time.Millisecond); time.Now().Before(deadline); {
		for i := range 100000 {
			x ^= i
		}
	}
	after, err := procTicks(os.Getpid(), false)
	require.NoError(t, err)
	require.Greater(t, after, before, "150 ms of work in this process (%d)", x)

	conn, err := pgx.Connect(ctx, pgtest.AdminURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var backend int
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend))
	pm, err := parentOf(backend)
	require.NoError(t, err)
	require.Greater(t, pm, 1)
	total, err := clusterCPU(pm)
	require.NoError(t, err)
	require.Greater(t, total, 0.0)

	// perEvent divides the difference.
	c := perEvent(cpuTimes{postgres: 1, idem: 2, harness: 3}, cpuTimes{postgres: 1.5, idem: 2.25, harness: 3.1}, 1000)
	require.InDelta(t, 500, c.Postgres, 1e-9)
	require.InDelta(t, 250, c.Idem, 1e-9)
	require.InDelta(t, 100, c.Harness, 1e-6)
	var m Method
	m.addCPU(c)
	m.addCPU(&CPU{Postgres: 700, Idem: 50, Harness: 300})
	require.InDelta(t, 600, m.CPU.Postgres, 1e-9, "the mean of the runs")
}
