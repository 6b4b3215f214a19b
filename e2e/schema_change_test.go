package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestSchemaChangeMidBackfillTwoReplicas runs, for each strategy, two
// replicas with a backfill in flight and the source gaining a column
// halfway, during a rolling config change: one replica still runs
// on_schema_change fail, the other append_new_columns. Every event loads
// once and none is dead-lettered: the replica that would refuse the change
// leaves those events to its peer. The column is added once, in a load's
// transaction, recorded beside that attempt; the rows loaded after it carry
// its values and those before keep NULL (append_dedupe's view carries it).
func TestSchemaChangeMidBackfillTwoReplicas(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		strategy, table, ddl, fields, reader string
	}{
		{"delete_insert", "analytics.wide", "CREATE TABLE analytics.wide (id bigint, event_date date, amount integer); CREATE INDEX ON analytics.wide (event_date)",
			"    partition_column: event_date\n", "analytics.wide"},
		{"merge", "analytics.wide", "CREATE TABLE analytics.wide (id bigint, event_date date, amount integer, PRIMARY KEY (id, event_date))",
			"    key: [id, event_date]\n", "analytics.wide"},
		{"append_dedupe", "analytics.wide", "CREATE TABLE analytics.wide (id bigint, event_date date, amount integer, run_id text, load_seq bigint)",
			"    key: [id]\n    partition_column: event_date\n    view: analytics.wide_latest\n", "analytics.wide_latest"},
	} {
		t.Run(c.strategy, func(t *testing.T) {
			t.Parallel()
			schemaChangeMidBackfill(t, c.strategy, c.ddl, c.fields, c.reader, c.strategy == "delete_insert")
		})
	}
}

// With downstream, wide triggers wide_copy (then:), which reads wide's
// partition and runs append_new_columns on both replicas: it must see the
// new column only once the load that added it committed, so each of its
// partitions equals wide's, channel included.
func schemaChangeMidBackfill(t *testing.T, strategy, ddl, fields, reader string, downstream bool) {
	w := newWorld(t, opts{})
	w.db.Exec(t, `
		CREATE TABLE staging.wsrc (id bigint, event_date date, amount integer);
		INSERT INTO staging.wsrc SELECT i, d::date, i FROM generate_series(1, 10) AS i,
		       generate_series('2026-10-01'::date, '2026-10-20', '1 day') AS d;
		`+ddl)
	base, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	then, copyYAML := "", ""
	if downstream {
		w.db.Exec(t, `CREATE TABLE analytics.wide_copy (id bigint, event_date date, amount integer)`)
		then = "    then: [wide_copy]\n"
		copyYAML = `  wide_copy:
    strategy: delete_insert
    target: analytics.wide_copy
    partition_column: event_date
    source: SELECT * FROM analytics.wide WHERE event_date = @partition
    on_schema_change: append_new_columns
    retries: 40
    retry_delay: 200ms
    max_retry_delay: 500ms
`
	}
	dataset := func(policy string) string {
		return string(base) + fmt.Sprintf(`  wide:
    strategy: %s
    target: analytics.wide
%s    source: SELECT * FROM staging.wsrc WHERE event_date = @partition
    on_schema_change: %s
%s    retries: 40
    retry_delay: 200ms
    max_retry_delay: 500ms
`, strategy, fields, policy, then) + copyYAML
	}
	oldPath, newPath := filepath.Join(w.dir, "idem-old.yaml"), filepath.Join(w.dir, "idem-new.yaml")
	require.NoError(t, os.WriteFile(oldPath, []byte(dataset("fail")), 0o600))
	require.NoError(t, os.WriteFile(newPath, []byte(dataset("append_new_columns")), 0o600))
	w.cfg = oldPath
	w.streams()
	w.serveConfig(oldPath)
	w.serveConfig(newPath)
	// Both replicas in the fleet's view, as in a rolling change that has
	// been going for a while.
	require.Eventually(t, func() bool { return fleetSize(t, w) == 2 }, time.Minute, 100*time.Millisecond)

	publish := func(from, to int) {
		for d := from; d <= to; d++ {
			body := fmt.Sprintf(`{"dataset":"wide","partition":"2026-10-%02d","run_id":"r1"}`, d)
			_, err := w.js.Publish(t.Context(), "idem.ready.wide", []byte(body))
			require.NoError(t, err)
		}
	}
	loaded := "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'wide'"
	publish(1, 10)
	require.Eventually(t, func() bool { return w.count(loaded) >= 4 }, time.Minute, 20*time.Millisecond)
	// Halfway, with loads in flight: the upstream adds a column.
	w.db.Exec(t, `ALTER TABLE staging.wsrc ADD COLUMN channel varchar(12); UPDATE staging.wsrc SET channel = 'web'`)
	publish(11, 20)
	require.Eventually(t, func() bool { return w.count(loaded) == 20 }, 3*time.Minute, 50*time.Millisecond, "every event loaded")
	w.waitSettled()
	require.Empty(t, w.deadLetters(), "no event was dead-lettered")

	require.EqualValues(t, 20, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'wide' AND status = 'success'"), "each loaded once")
	// The old replica met the change too, and left it to its peer: its
	// refusals are recorded as transient, never as fatal.
	require.EqualValues(t, 0, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'wide' AND error_kind = 'fatal'"))
	// Which replica meets the change first is up to the pull order; the
	// old one usually does, and then its attempts say so.
	t.Logf("attempts the fail replica left to its peer: %d",
		w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'wide' AND error LIKE '%left to it%'"))
	require.EqualValues(t, 200, w.count("SELECT count(*) FROM "+reader))
	require.EqualValues(t, 1, w.count(`SELECT count(*) FROM pg_attribute WHERE attrelid = 'analytics.wide'::regclass AND attname = 'channel'
	    AND format_type(atttypid, atttypmod) = 'character varying(12)'`))
	require.EqualValues(t, 100, w.count("SELECT count(*) FROM "+reader+" WHERE event_date >= '2026-10-11' AND channel = 'web'"),
		"the rows loaded after the change carry the new column")
	require.Positive(t, w.count("SELECT count(*) FROM "+reader+" WHERE event_date <= '2026-10-10' AND channel IS NULL"),
		"the rows loaded before keep NULL")
	require.EqualValues(t, 1, w.count(`SELECT count(*) FROM idem.schema_changes WHERE task_id = 'wide' AND column_name = 'channel'
	    AND change = 'new_column' AND action = 'added' AND policy = 'append_new_columns' AND new_type = 'character varying(12)'`),
		"the column was added once, recorded")
	// The addition is recorded beside the successful attempt that made it.
	require.EqualValues(t, 1, w.count(`SELECT count(*) FROM idem.schema_changes c JOIN idem.pipeline_audit a ON a.id = c.audit_id
	    WHERE c.task_id = 'wide' AND c.action = 'added' AND a.status = 'success'`))
	if downstream {
		require.Eventually(t, func() bool {
			return w.count("SELECT count(*) FROM idem.run_ledger WHERE task_id = 'wide_copy'") == 20
		}, 2*time.Minute, 50*time.Millisecond, "every downstream partition loaded")
		w.waitSettled()
		require.Empty(t, w.deadLetters())
		require.Contains(t, columnsOf(t, w, "analytics.wide_copy"), "channel", "the downstream took the new column too")
		require.EqualValues(t, 0, w.count(`SELECT count(*) FROM (
		    (SELECT id, event_date, amount, channel FROM analytics.wide EXCEPT ALL SELECT id, event_date, amount, channel FROM analytics.wide_copy)
		    UNION ALL
		    (SELECT id, event_date, amount, channel FROM analytics.wide_copy EXCEPT ALL SELECT id, event_date, amount, channel FROM analytics.wide)) d`),
			"each downstream partition is its upstream's, as committed")
	}
	// idem audit schema lists it.
	out, err := exec.Command(idemBin, "audit", "schema", "wide", "--config", newPath).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "channel")
	require.Contains(t, string(out), "added")
}

// columnsOf names rel's columns.
func columnsOf(t *testing.T, w *world, rel string) []string {
	t.Helper()
	rows, err := w.db.Pool.Query(t.Context(), `SELECT attname::text FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, rel)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return cols
}

// fleetSize is how many replicas' entries the fleet bucket holds.
func fleetSize(t *testing.T, w *world) int {
	n := 0
	for name := range w.js.KeyValueStoreNames(t.Context()).Name() {
		if !strings.Contains(name, "fleet") {
			continue
		}
		kv, err := w.js.KeyValue(t.Context(), name)
		require.NoError(t, err)
		keys, err := kv.Keys(t.Context())
		if err == nil {
			n += len(keys)
		}
	}
	return n
}

// TestSchemaChangeLockNotGranted: a reader holds the target while a load
// must add a column. The ALTER gives up after its lock_timeout, the attempt
// is transient and redelivered, nothing is dead-lettered, and once the
// reader is gone the event loads with the column added.
func TestSchemaChangeLockNotGranted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.db.Exec(t, `
		CREATE TABLE staging.lsrc (id bigint, event_date date, amount integer, note text);
		INSERT INTO staging.lsrc SELECT i, '2026-10-01', i, 'n' FROM generate_series(1, 10) AS i;
		CREATE TABLE analytics.locked (id bigint, event_date date, amount integer);`)
	base, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	cfg := filepath.Join(w.dir, "idem-locked.yaml")
	require.NoError(t, os.WriteFile(cfg, append(base, []byte(`  locked:
    strategy: delete_insert
    target: analytics.locked
    partition_column: event_date
    source: SELECT * FROM staging.lsrc WHERE event_date = @partition
    on_schema_change: append_new_columns
    retries: 40
    retry_delay: 200ms
    max_retry_delay: 500ms
`)...), 0o600))
	w.cfg = cfg
	w.streams()
	w.serveConfig(cfg)

	reader, err := w.db.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(context.WithoutCancel(t.Context())) }()
	_, err = reader.Exec(t.Context(), "SELECT count(*) FROM analytics.locked")
	require.NoError(t, err)
	_, err = w.js.Publish(t.Context(), "idem.ready.locked", []byte(`{"dataset":"locked","partition":"2026-10-01","run_id":"r1"}`))
	require.NoError(t, err)
	notGranted := "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'locked' AND status = 'failed' AND error_kind = 'transient' AND error LIKE '%lock was not granted%'"
	require.Eventually(t, func() bool { return w.count(notGranted) >= 2 }, time.Minute, 50*time.Millisecond, "retried while the reader holds the table")
	require.NotContains(t, columnsOf(t, w, "analytics.locked"), "note", "nothing half changed")
	require.NoError(t, reader.Rollback(t.Context()))

	require.Eventually(t, func() bool {
		return w.count("SELECT count(*) FROM idem.run_ledger WHERE task_id = 'locked'") == 1
	}, time.Minute, 50*time.Millisecond, "loaded once the reader is gone")
	w.waitSettled()
	require.Empty(t, w.deadLetters())
	require.Contains(t, columnsOf(t, w, "analytics.locked"), "note")
	require.EqualValues(t, 10, w.count("SELECT count(*) FROM analytics.locked WHERE note = 'n'"))
}
