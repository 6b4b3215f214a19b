package strategies

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

const groupSchema = `CREATE SCHEMA idem; CREATE SCHEMA staging; CREATE SCHEMA analytics;
CREATE FUNCTION idem.outside_partition(got anyelement, want text) RETURNS anyelement LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'source returned a row for partition % while loading partition %', got, want USING ERRCODE = '22023'; END $$;
CREATE TABLE staging.src (id bigint, day date, note text);
CREATE INDEX ON staging.src (day);
CREATE TABLE analytics.plain (id bigint, day date NOT NULL, note text);
CREATE INDEX plain_day ON analytics.plain (day);
CREATE TABLE analytics.parts (id bigint, day date NOT NULL, note text) PARTITION BY RANGE (day);
CREATE TABLE analytics.parts_20261101 PARTITION OF analytics.parts FOR VALUES FROM ('2026-11-01') TO ('2026-11-02');
CREATE TABLE analytics.parts_rest PARTITION OF analytics.parts DEFAULT;
CREATE INDEX ON analytics.parts (day);
CREATE TABLE staging.tsrc (id bigint, k text);
CREATE TABLE analytics.t (id bigint, k text NOT NULL);`

// groupLoad runs the loads of ps as the handler's group does: one
// transaction, every plan described in one round trip, every load queued
// by QueueLoads and sent in another.
func groupLoad(ctx context.Context, db *pgtest.DB, s Strategy, ps []Params) ([]*Result, *pgx.Batch, error) {
	gl := s.(GroupLoader)
	var res []*Result
	var sent *pgx.Batch
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue("SET LOCAL plan_cache_mode = force_custom_plan")
		dps := make([]*Plan, len(ps))
		for i, p := range ps {
			if i == 0 {
				dps[i] = gl.Describe(b, p)
			} else {
				dps[i] = gl.DescribeShared(b, p, dps[0])
			}
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
		r, finish, err := gl.QueueLoads(ctx, tx, dps, ps, b)
		if err != nil {
			return err
		}
		res, sent = r, b
		return finish(tx.SendBatch(ctx, b).Close())
	})
	return res, sent, err
}

func days(from int, n int) []Params {
	ps := make([]Params, n)
	for i := range ps {
		ps[i] = Params{Partition: fmt.Sprintf("2026-11-%02d", from+i), RunID: fmt.Sprintf("r%d", from+i)}
	}
	return ps
}

// TestGroupLoadsInTwoStatements: a group of delete_insert loads sends one
// DELETE and one INSERT for all its partitions, counts each partition's
// rows for it alone, refuses a stray row as one load does, and leaves the
// other partitions' rows as they were.
func TestGroupLoadsInTwoStatements(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, groupSchema)
	// Days 1 to 3: 1, 2 and 3 rows in the source; day 9 is not loaded.
	db.Exec(t, `INSERT INTO staging.src SELECT d * 100 + i, make_date(2026, 11, d), 'new' FROM generate_series(1, 3) d, generate_series(1, d) i`)
	db.Exec(t, `INSERT INTO staging.src VALUES (900, '2026-11-09', 'new')`)
	for _, target := range []string{"plain", "parts"} {
		t.Run(target, func(t *testing.T) {
			db.Exec(t, `INSERT INTO analytics.`+target+` VALUES (1, '2026-11-01', 'old'), (2, '2026-11-01', 'old'), (3, '2026-11-03', 'old'), (9, '2026-11-09', 'old')`)
			s, err := New("delete_insert", Spec{Target: Table{Schema: "analytics", Name: target}, PartitionColumn: "day",
				Source: "SELECT id, day, note FROM staging.src WHERE day = @partition"})
			require.NoError(t, err)
			for run := range 2 { // the second run replaces what the first loaded
				res, b, err := groupLoad(ctx, db, s, days(1, 3))
				require.NoError(t, err)
				require.Len(t, b.QueuedQueries, 2, "one DELETE and one INSERT for the group")
				want := []int64{2, 0, 1}
				if run == 1 {
					want = []int64{1, 2, 3}
				}
				for i, r := range res {
					require.Equal(t, Result{Inserted: int64(i + 1), Deleted: want[i], Route: routeGroup}, *r, "day %d, run %d", i+1, run)
				}
				require.Equal(t, int64(6), db.Int(t, `SELECT count(*) FROM analytics.`+target+` WHERE note = 'new'`))
				require.Zero(t, db.Int(t, `SELECT count(*) FROM analytics.`+target+` WHERE note = 'old' AND day < '2026-11-09'`))
				require.Equal(t, int64(1), db.Int(t, `SELECT count(*) FROM analytics.`+target+` WHERE day = '2026-11-09' AND note = 'old'`), "day 9 untouched")
			}
			if target == "parts" {
				require.Equal(t, int64(1), db.Int(t, `SELECT count(*) FROM analytics.parts_20261101`), "routed to the day's child")
			}
		})
	}

	t.Run("stray row", func(t *testing.T) {
		s, err := New("delete_insert", Spec{Target: Table{Schema: "analytics", Name: "plain"}, PartitionColumn: "day",
			Source: "SELECT id, CASE WHEN id = 201 THEN '2026-11-09'::date ELSE day END AS day, note FROM staging.src WHERE day = @partition"})
		require.NoError(t, err)
		before := db.Int(t, `SELECT count(*) FROM analytics.plain`)
		_, _, err = groupLoad(ctx, db, s, days(1, 3))
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "22023", pgErr.Code)
		require.Contains(t, pgErr.Message, "source returned a row for partition 2026-11-09 while loading partition 2026-11-02")
		require.Equal(t, before, db.Int(t, `SELECT count(*) FROM analytics.plain`), "rolled back")
	})

	t.Run("empty partition", func(t *testing.T) {
		s, err := New("delete_insert", Spec{Target: Table{Schema: "analytics", Name: "plain"}, PartitionColumn: "day",
			Source: "SELECT id, day, note FROM staging.src WHERE day = @partition"})
		require.NoError(t, err)
		_, _, err = groupLoad(ctx, db, s, append(days(1, 2), Params{Partition: "2026-11-20", RunID: "r20"}))
		require.ErrorIs(t, err, ErrEmptySource)
	})

	t.Run("a source with another parameter", func(t *testing.T) {
		// @run_id differs per load: one DELETE, then an INSERT each.
		s, err := New("delete_insert", Spec{Target: Table{Schema: "analytics", Name: "plain"}, PartitionColumn: "day",
			Source: "SELECT id, day, @run_id AS note FROM staging.src WHERE day = @partition"})
		require.NoError(t, err)
		res, b, err := groupLoad(ctx, db, s, days(1, 3))
		require.NoError(t, err)
		require.Len(t, b.QueuedQueries, 4)
		for i, r := range res {
			require.Equal(t, Result{Inserted: int64(i + 1), Deleted: int64(i + 1), Route: routeDelete}, *r)
			require.Equal(t, int64(i+1), db.Int(t, `SELECT count(*) FROM analytics.plain WHERE note = $1`, fmt.Sprintf("r%d", i+1)))
		}
	})

	t.Run("hostile partition keys", func(t *testing.T) {
		keys := []string{`O'Brien; DROP TABLE analytics.t; --`, `a"b\c`, `{x,y}`, `NULL`, ``}
		for i, k := range keys {
			db.Exec(t, `INSERT INTO staging.tsrc VALUES ($1, $2), ($1, $2)`, i, k)
			db.Exec(t, `INSERT INTO analytics.t VALUES ($1, $2)`, i, k)
		}
		db.Exec(t, `INSERT INTO analytics.t VALUES (99, 'O''Brien')`)
		s, err := New("delete_insert", Spec{Target: Table{Schema: "analytics", Name: "t"}, PartitionColumn: "k",
			Source: "SELECT id, k FROM staging.tsrc WHERE k = @partition -- a comment naming @run_id"})
		require.NoError(t, err)
		ps := make([]Params, len(keys))
		for i, k := range keys {
			ps[i] = Params{Partition: k, RunID: "r"}
		}
		res, b, err := groupLoad(ctx, db, s, ps)
		require.NoError(t, err)
		require.Len(t, b.QueuedQueries, 2)
		for i, r := range res {
			require.Equal(t, Result{Inserted: 2, Deleted: 1, Route: routeGroup}, *r, "key %q", keys[i])
			require.Equal(t, int64(2), db.Int(t, `SELECT count(*) FROM analytics.t WHERE k = $1`, keys[i]))
		}
		require.Equal(t, int64(1), db.Int(t, `SELECT count(*) FROM analytics.t WHERE k = 'O''Brien'`), "a key the group does not hold")
	})

	t.Run("@partition in a string", func(t *testing.T) {
		// pgx would not rewrite it, so the statement could not either: an
		// INSERT per partition.
		s, err := New("delete_insert", Spec{Target: Table{Schema: "analytics", Name: "plain"}, PartitionColumn: "day",
			Source: "SELECT id, day, '@partition' AS note FROM staging.src WHERE day = @partition"})
		require.NoError(t, err)
		res, b, err := groupLoad(ctx, db, s, days(1, 3))
		require.NoError(t, err)
		require.Len(t, b.QueuedQueries, 4)
		require.Equal(t, routeDelete, res[0].Route)
	})
}

// seqScanOf finds a sequential scan of the target or the source in a plan.
var seqScanOf = regexp.MustCompile(`Seq Scan on (plain|src)\b`)

// TestGroupStatementPlans: the group's DELETE and INSERT take the
// partition column's index on the target and the source's index for each
// partition, at 1k and at 100k rows, analyzed or not, and analyzed when
// the tables were a hundredth of their size: a group costs the same
// whatever the history. (They are planned at each execution, for the
// partitions given and the tables as they are; a table of a few pages is
// read whole.)
func TestGroupStatementPlans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, groupSchema)
	db.Exec(t, `ALTER TABLE analytics.plain SET (autovacuum_enabled = false); ALTER TABLE staging.src SET (autovacuum_enabled = false)`)
	s, err := New("delete_insert", Spec{Target: Table{Schema: "analytics", Name: "plain"}, PartitionColumn: "day",
		Source: "SELECT id, day, note FROM staging.src WHERE day = @partition"})
	require.NoError(t, err)
	// The statements as the group sends them, from a load of 8 days.
	db.Exec(t, `INSERT INTO staging.src SELECT i, '2026-11-01'::date + i % 8, 'x' FROM generate_series(1, 16) i`)
	_, b, err := groupLoad(ctx, db, s, days(1, 8))
	require.NoError(t, err)
	require.Len(t, b.QueuedQueries, 2)
	// check: strict, the INSERT's read of the source must take its index
	// too; below that, a source of a few pages may be read whole, once for
	// the group, instead of once per partition.
	check := func(state string, strict bool) {
		t.Helper()
		for i, q := range b.QueuedQueries {
			var plan strings.Builder
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
					return err
				}
				rows, err := tx.Query(ctx, "EXPLAIN "+q.SQL, q.Arguments...)
				if err != nil {
					return err
				}
				for rows.Next() {
					var line string
					if err := rows.Scan(&line); err != nil {
						return err
					}
					plan.WriteString(line + "\n")
				}
				return rows.Err()
			})
			require.NoError(t, err)
			if os.Getenv("IDEM_PLANS_VERBOSE") != "" {
				t.Logf("%s: statement %d:\n%s", state, i, plan.String())
			}
			if i == 1 && !strict {
				continue
			}
			if m := seqScanOf.FindString(plan.String()); m != "" {
				t.Errorf("%s: statement %d reads a whole table (%s):\n%s", state, i, m, plan.String())
			}
			idx := "plain_day"
			if i == 1 {
				idx = "src_day_idx"
			}
			if !strings.Contains(plan.String(), idx) {
				t.Errorf("%s: statement %d does not use %s", state, i, idx)
			}
		}
	}
	// At 16 rows a whole read of each is what the planner should pick.
	grow := func(to int) {
		have := int(db.Int(t, `SELECT count(*) FROM staging.src`))
		db.Exec(t, `INSERT INTO staging.src SELECT i, '2020-01-01'::date + i / 10, 'x' FROM generate_series($1::int, $2::int) i`, have+1, to)
		db.Exec(t, `INSERT INTO analytics.plain SELECT i, '2020-01-01'::date + i / 10, 'x' FROM generate_series($1::int, $2::int) i`, have+1, to)
	}
	grow(1000)
	check("1k rows, never analyzed", false)
	db.Exec(t, `ANALYZE analytics.plain, staging.src`)
	check("1k rows, analyzed", false)
	grow(10000)
	check("10k rows, analyzed at 1k", true)
	grow(100000)
	check("100k rows, analyzed at 1k", true)
	db.Exec(t, `ANALYZE analytics.plain, staging.src`)
	check("100k rows, analyzed", true)
}
