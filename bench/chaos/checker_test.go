package chaos

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
)

// loadByHand fills every target from staging as a correct loader would, so
// the checker has a known-good state to start from.
const loadByHand = `
INSERT INTO analytics.replace SELECT ` + columns + ` FROM staging.replace_src;
INSERT INTO analytics.replace_part SELECT ` + columns + ` FROM staging.replace_part_src;
INSERT INTO analytics.upsert SELECT ` + columns + ` FROM staging.upsert_src;
INSERT INTO analytics.append_raw SELECT ` + columns + `, 'r1', 1 FROM staging.append_src;
CREATE VIEW analytics.append_latest AS
  SELECT DISTINCT ON (event_date, id) ` + columns + ` FROM analytics.append_raw ORDER BY event_date, id, load_seq DESC;
WITH a AS (
  INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
  SELECT 'chaos', 'append', d::text, 'r1', 'success', 1, now() FROM (SELECT DISTINCT event_date AS d FROM staging.append_src) x
  RETURNING id, partition_key)
INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id) SELECT 'chaos', 'append', partition_key, 'r1', id FROM a;
`

// The checker must see each kind of damage on its own: a checker that
// passes everything would make every campaign pass.
func TestCheckTablesSeesEveryKindOfDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage string
		want   func(c CheckFigures) int
	}{
		{"lost", "DELETE FROM analytics.replace WHERE id = (SELECT min(id) FROM analytics.replace)",
			func(c CheckFigures) int { return c.LostRows }},
		{"doubled", "INSERT INTO analytics.replace_part SELECT * FROM analytics.replace_part WHERE id = (SELECT min(id) FROM analytics.replace_part)",
			func(c CheckFigures) int { return c.DoubledRows }},
		{"stale", "UPDATE analytics.upsert SET amount = amount + 1 WHERE id = (SELECT min(id) FROM analytics.upsert)",
			func(c CheckFigures) int { return c.StaleRows }},
		{"unexpected", "INSERT INTO analytics.upsert VALUES (999999999, '2026-01-01', 1, 'ghost', 1)",
			func(c CheckFigures) int { return c.UnexpectedRows }},
		{"run loaded twice", "INSERT INTO analytics.append_raw SELECT " + columns + ", 'r1', 2 FROM analytics.append_raw WHERE event_date = '2026-01-01'",
			func(c CheckFigures) int { return c.RunsLoadedTwice }},
		{"rows without load", "UPDATE analytics.append_raw SET run_id = 'r9' WHERE event_date = '2026-01-02'",
			func(c CheckFigures) int { return c.RowsWithoutLoad }},
	}
	db := checkerDB(t)
	ctx := context.Background()
	r := &Report{}
	require.NoError(t, checkTables(ctx, db, r))
	require.Empty(t, r.Violations, "a correct load must pass")
	require.True(t, r.Check.TablesEqualReference)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, tc.damage)
			require.NoError(t, err)
			r := &Report{}
			require.NoError(t, checkTables(ctx, tx, r))
			require.Positive(t, tc.want(r.Check), "%+v", r.Check)
			require.NotEmpty(t, r.Violations)
		})
	}
}

func checkerDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	s := pg(t)
	admin, err := pgx.Connect(ctx, s.URL(""))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS chaos_checker WITH (FORCE)")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE chaos_checker")
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	db, err := pgxpool.New(ctx, s.URL("chaos_checker"))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, err = audit.Migrate(ctx, db)
	require.NoError(t, err)
	require.NoError(t, createSchema(ctx, db, 4, 0, rand.New(rand.NewPCG(1, 2))))
	_, err = db.Exec(ctx, loadByHand)
	require.NoError(t, err)
	return db
}

// Two delete_insert loads that overlapped leave a trace in the audit even
// once a later load has repaired the table: the second deleted what the
// first found, not what the first inserted.
func TestCheckChainsSeesOverlappingLoads(t *testing.T) {
	ctx := context.Background()
	db := checkerDB(t)
	_, err := db.Exec(ctx, `
INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, rows_inserted, rows_deleted, started_at, finished_at)
VALUES ('chaos', 'replace', '2026-01-01', 'a', 'success', 1, 5, 0, now(), now() + interval '1 s'),
       ('chaos', 'replace', '2026-01-01', 'b', 'success', 1, 6, 5, now(), now() + interval '2 s'),
       ('chaos', 'replace_part', '2026-01-01', 'a', 'success', 1, 4, NULL, now(), now() + interval '1 s'),
       ('chaos', 'replace_part', '2026-01-01', 'b', 'success', 1, 4, NULL, now(), now() + interval '2 s')`)
	require.NoError(t, err)
	r := &Report{}
	require.NoError(t, checkChains(ctx, db, r))
	require.Zero(t, r.Check.ChainBreaks, "serial loads, and the TRUNCATE route whose deletions are unknown: %v", r.Violations)

	_, err = db.Exec(ctx, `INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, rows_inserted, rows_deleted, started_at, finished_at)
VALUES ('chaos', 'replace', '2026-01-01', 'c', 'success', 1, 6, 5, now(), now() + interval '3 s')`)
	require.NoError(t, err)
	r = &Report{}
	require.NoError(t, checkChains(ctx, db, r))
	require.Equal(t, 1, r.Check.ChainBreaks)
	require.Contains(t, r.Violations[0], "deleted 5 rows where the previous load had inserted 6")
}

// A valid event dead-lettered during an outage or a deploy is a violation,
// whatever else overlapped its life; one whose attempts faults that end
// loads could have spent is excused; one with neither is a violation too.
func TestJudgeTransientNeverExcusesOutages(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	f := func(kind string, from, to float64) *fault { return &fault{Kind: kind, Start: at(from), End: at(to)} }
	ackWait := 2 * time.Second
	h := history{
		faults: []*fault{
			f(FaultKill, 10, 10),
			f(FaultWarehouseDown, 20, 50),
			f(FaultResetPeer, 100, 102),
			f(FaultNATSDown, 200, 230),
			f(FaultLatency, 300, 308),
			f(FaultRollingRestart, 400, 409),
			f(FaultPause, 500, 504),
			f(FaultPGTerminate, 600, 600),
			{Kind: FaultKill, Start: at(700), End: at(700), Skipped: "replica not running"},
			// The standby stopped at 1000, the primary killed at 1003, the
			// standby promoted at 1004, the new standby made by 1006.
			{Kind: FaultFailover, Start: at(1000), End: at(1006), Killed: at(1003), Promoted: at(1004)},
		},
		exits: []exit{{Crashed: true, At: at(800)}},
	}
	ws := faultWindows(h, ackWait)
	cases := []struct {
		name         string
		sent, failed float64
		kind         string
		want         verdict
		by           string
	}{
		{"exhausted in a warehouse outage", 21, 30, "exhausted", inOutage, FaultWarehouseDown},
		{"a kill before does not excuse the outage", 5, 30, "exhausted", inOutage, FaultWarehouseDown},
		{"the outage's tail: redeliveries after the start", 21, 50 + 11, "exhausted", inOutage, FaultWarehouseDown},
		{"crashed after NATS came back", 190, 235, "crashed", inOutage, FaultNATSDown},
		{"crashed in a rolling restart", 395, 405, "crashed", inOutage, FaultRollingRestart},
		{"exhausted when sessions were terminated", 590, 600.5, "exhausted", inOutage, FaultPGTerminate},
		{"exhausted after resets", 99, 103, "exhausted", excused, FaultResetPeer},
		{"crashed after a kill", 9, 12, "crashed", excused, FaultKill},
		{"crashed after a pause", 499, 505, "crashed", excused, FaultPause},
		{"crashed after the crash hook", 799, 801, "crashed", excused, FaultCrashCommit},
		{"crashed after resets: resets never leave an attempt without a verdict", 99, 103, "crashed", unexplained, ""},
		{"latency fails no load", 299, 306, "exhausted", unexplained, ""},
		{"a skipped kill did nothing", 699, 701, "crashed", unexplained, ""},
		{"nothing at all", 900, 910, "exhausted", unexplained, ""},
		{"exhausted by the load the failover's kill ended", 990, 1003.1, "exhausted", excused, FaultFailover},
		{"exhausted while no server takes writes", 990, 1003.5 + failoverKillMargin.Seconds(), "exhausted", inOutage, failoverOutage},
		{"exhausted on the new primary, redeliveries after the promotion", 990, 1004 + 11, "exhausted", inOutage, failoverOutage},
		{"a failover kills no replica", 990, 1003.1, "crashed", unexplained, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, by := judgeTransient(ws, at(c.sent), deadLetter{kind: c.kind, failedAt: at(c.failed)})
			require.Equal(t, c.want, v)
			require.Equal(t, c.by, by)
		})
	}
}

// The report sums idem's re-verification lines, finished or not, as the
// service logs them; other lines, and a line cut short, count nothing.
func TestScanLogSumsReverificationPasses(t *testing.T) {
	log := filepath.Join(t.TempDir(), "replica0-001.log")
	require.NoError(t, os.WriteFile(log, []byte(`{"level":"info","message":"idem serve started"}
{"level":"info","reason":"the warehouse is back after the circuit opened","window":900000,"checked":282,"missing":3,"reloaded":2,"loaded_ahead":1,"skipped":0,"superseded":0,"failed":0,"took":1032.9,"message":"warehouse re-verified: events of the window checked against the ledger"}
{"level":"warn","error":"reverify: lock: unexpected EOF","reason":"the warehouse is back after the circuit opened","window":900000,"checked":0,"missing":0,"reloaded":0,"loaded_ahead":0,"skipped":0,"superseded":0,"failed":0,"took":637.6,"message":"warehouse re-verified: events of the window checked against the ledger"}
{"level":"info","reason":"the warehouse is not the one last verified","checked":40,"missing":7,"reloaded":3,"loaded_ahead":0,"skipped":2,"superseded":1,"failed":1,"message":"warehouse re-verified: events of the window checked against the ledger"}
{"level":"info","checked":99,"message":"warehouse re-verified: events of the window che
`), 0o644))
	require.Equal(t, ReverifyFigures{Passes: 3, Unfinished: 1, Checked: 322, Missing: 10, Reloaded: 5, Ahead: 1, Skipped: 2, Failed: 1},
		scanLog(log).reverify)
}

// An operator's pause sends a message of the paused dataset back for later:
// a fatal input dead-lettered on its second delivery then is explained, as
// one after a fault is. Seen in a run without faults, where the checker
// called it unexplained.
func TestAPauseExplainsAFatalInputsRedelivery(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	fatal := func(dataset string) *event {
		ev := &event{idx: 7, dataset: dataset, fatal: "empty_partition", want: "empty_source"}
		ev.copies = []*pubCopy{{ev: ev, sentAt: at(100)}}
		return ev
	}
	dl := []deadLetter{{kind: "fatal", err: "empty_source: the source returned no rows", deliveries: "2", failedAt: at(103)}}
	cases := []struct {
		name    string
		dataset string
		pauses  []time.Time
		want    int // violations
	}{
		{"paused while it waited", pausedDataset, []time.Time{at(99)}, 0},
		{"a pause that returned just after the first delivery", pausedDataset, []time.Time{at(104)}, 0},
		{"a pause that had ended", pausedDataset, []time.Time{at(80)}, 1},
		{"a pause long after", pausedDataset, []time.Time{at(200)}, 1},
		{"no pause", pausedDataset, nil, 1},
		{"another dataset is never paused", "upsert", []time.Time{at(99)}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &Report{}
			checkFatal(fatal(c.dataset), dl, nil, pauseWindows(c.pauses, DefaultAckWait), map[runKey]int{}, r)
			require.Len(t, r.Violations, c.want, "%v", r.Violations)
			require.Equal(t, 1, r.Check.FatalRedelivered)
			require.Equal(t, 1-c.want, r.Check.FatalRedeliveredExpl)
		})
	}
}
