package chaos

import (
	"context"
	"math/rand/v2"
	"testing"

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
