package checks_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const tables = `
CREATE SCHEMA analytics;
CREATE TABLE analytics.customers (customer_id int PRIMARY KEY);
INSERT INTO analytics.customers VALUES (1), (2);
CREATE TABLE analytics.orders (order_id int, event_date date NOT NULL, customer_id int, status text, total numeric(12,2));
-- another partition's rows: never in scope
INSERT INTO analytics.orders VALUES (1, '2026-11-02', 9, 'bogus', -5), (1, '2026-11-02', 9, 'bogus', -5);
`

// good is a partition every check below passes; each case changes it.
const good = `INSERT INTO analytics.orders VALUES
 (1, '2026-11-01', 1, 'paid', 10), (2, '2026-11-01', 2, 'refunded', 20), (3, '2026-11-01', NULL, NULL, NULL), (NULL, '2026-11-01', 1, 'paid', 5)`

func parse(t *testing.T, y string) []config.Check {
	t.Helper()
	var cs []config.Check
	require.NoError(t, yaml.Unmarshal([]byte(y), &cs))
	return cs
}

// run loads the rows of sql (after good's) into the partition in a
// transaction, runs the checks and rolls back.
func run(t *testing.T, db *pgtest.DB, y, sql string, baseline int64) ([]checks.Outcome, error) {
	t.Helper()
	ctx := context.Background()
	st, err := strategies.New("delete_insert", strategies.Spec{Dataset: "orders", Target: strategies.Table{Schema: "analytics", Name: "orders"},
		Source: "SELECT 1 WHERE @partition::date IS NOT NULL", PartitionColumn: "event_date"})
	require.NoError(t, err)
	set := checks.New(config.Specs(parse(t, y)), st)
	var outs []checks.Outcome
	var runErr error
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		for _, s := range []string{good, sql} {
			if s != "" {
				if _, err := tx.Exec(ctx, s); err != nil {
					return err
				}
			}
		}
		require.NoError(t, set.Explain(ctx, tx, strategies.Params{Partition: "2026-11-01", RunID: "r1"}))
		outs, runErr = set.Run(ctx, tx, strategies.Params{Partition: "2026-11-01", RunID: "r1"}, baseline)
		return pgx.ErrTxClosed // roll back
	})
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	return outs, runErr
}

func TestEveryKindPassesAndFails(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, tables)
	for _, tc := range []struct {
		name, check, extra string
		failing            int64
		status             string
	}{
		// unique: the NULL key row is ignored; a doubled day fails by key values.
		{"unique passes", `[{unique: [order_id]}]`, "", 0, "pass"},
		{"unique doubled", `[{unique: [order_id]}]`, "INSERT INTO analytics.orders SELECT * FROM analytics.orders WHERE event_date = '2026-11-01' AND order_id IS NOT NULL", 3, "fail"},
		{"unique NULL keys ignored", `[{unique: [order_id]}]`, "INSERT INTO analytics.orders VALUES (NULL, '2026-11-01', 1, 'paid', 1)", 0, "pass"},
		// not_null: rows with a NULL in any column.
		{"not_null passes", `[{not_null: [event_date]}]`, "", 0, "pass"},
		{"not_null fails", `[{not_null: [order_id, total]}]`, "", 2, "fail"},
		// accepted_values: NULL passes.
		{"accepted_values passes", `[{accepted_values: {column: status, values: [paid, refunded]}}]`, "", 0, "pass"},
		{"accepted_values fails", `[{accepted_values: {column: status, values: [paid, refunded]}}]`, "INSERT INTO analytics.orders VALUES (9, '2026-11-01', 1, 'chargeback', 1)", 1, "fail"},
		// accepted_range: inclusive bounds, NULL passes.
		{"accepted_range passes", `[{accepted_range: {column: total, min: 5, max: 20}}]`, "", 0, "pass"},
		{"accepted_range fails", `[{accepted_range: {column: total, min: 0}}]`, "INSERT INTO analytics.orders VALUES (9, '2026-11-01', 1, 'paid', -0.01)", 1, "fail"},
		// relationships: NULL passes.
		{"relationships passes", `[{relationships: {column: customer_id, to: analytics.customers, field: customer_id}}]`, "", 0, "pass"},
		{"relationships fails", `[{relationships: {column: customer_id, to: analytics.customers, field: customer_id}}]`, "INSERT INTO analytics.orders VALUES (9, '2026-11-01', 3, 'paid', 1)", 1, "fail"},
		// row_count counts every row of the partition.
		{"row_count passes", `[{row_count: {min: 4, max: 4}}]`, "", 0, "pass"},
		{"row_count fails", `[{row_count: {min: 5}}]`, "", 4, "fail"},
		// expression: rows where it is false; NULL is not false.
		{"expression passes", `[{expression: "total >= 0"}]`, "", 0, "pass"},
		{"expression fails", `[{expression: "total > 5 OR status = 'refunded'"}]`, "", 1, "fail"}, // the NULL row is not false
		// sql: the rows it returns.
		{"sql passes", `[{sql: "SELECT order_id FROM analytics.orders WHERE event_date = @partition AND total > 1e6"}]`, "", 0, "pass"},
		{"sql fails", `[{sql: "SELECT order_id FROM analytics.orders WHERE event_date = @partition AND total < 10"}]`, "", 1, "fail"},
		// severity warn and the thresholds.
		{"warn", `[{not_null: [total], severity: warn}]`, "", 1, "warn"},
		{"max_failing holds", `[{not_null: [order_id, total], max_failing: 2}]`, "", 2, "pass"},
		{"max_failing passed", `[{not_null: [order_id, total], max_failing: 1}]`, "", 2, "fail"},
		{"max_failing_ratio holds", `[{not_null: [order_id, total], max_failing_ratio: 0.5}]`, "", 2, "pass"},
		{"max_failing_ratio passed", `[{not_null: [order_id, total], max_failing_ratio: 0.49}]`, "", 2, "fail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outs, err := run(t, db, tc.check, tc.extra, 0)
			require.NoError(t, err)
			require.Len(t, outs, 1)
			o := outs[0]
			require.Equal(t, tc.status, o.Status, "%+v", o)
			require.Equal(t, tc.failing, o.Failing, "%+v", o)
			if o.Status == "fail" || o.Status == "warn" {
				if o.Kind != config.CheckRowCount {
					var samples []map[string]any
					require.NoError(t, json.Unmarshal(o.Samples, &samples), string(o.Samples))
					require.NotEmpty(t, samples)
					require.LessOrEqual(t, len(samples), 5)
				}
			}
			refused := checks.Refused(outs)
			require.Equal(t, tc.status == "fail", refused != nil)
			if refused != nil {
				require.Contains(t, refused.Error(), "check_failed: "+o.Name)
			}
		})
	}
}

func TestRowCountChange(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, tables)
	y := `[{row_count_change: {max_drop: 50%, max_rise: 400%, min_baseline: 3}}]`
	for _, tc := range []struct {
		baseline int64
		status   string
	}{
		{2, "skipped"}, // under min_baseline
		{4, "pass"},    // 4 rows replace 4
		{8, "pass"},    // a drop of 50% is allowed
		{9, "fail"},    // 4 rows replace 9: a drop of 56%
		{1000, "fail"}, // an extract that stopped short
	} {
		outs, err := run(t, db, y, "", tc.baseline)
		require.NoError(t, err)
		require.Equal(t, tc.status, outs[0].Status, "baseline %d: %+v", tc.baseline, outs[0])
	}
}

// TestFromCountsAgreesWithRun: where the strategy counts its load's rows,
// the row-count checks are evaluated from those counts with no statement;
// every outcome must be the one the statement would have given.
func TestFromCountsAgreesWithRun(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, tables)
	st, err := strategies.New("delete_insert", strategies.Spec{Dataset: "orders", Target: strategies.Table{Schema: "analytics", Name: "orders"},
		Source: "SELECT 1 WHERE @partition::date IS NOT NULL", PartitionColumn: "event_date"})
	require.NoError(t, err)
	produced, replaced := st.Counts()
	require.True(t, produced && replaced, "delete_insert counts both")
	y := `[{row_count: {min: 3, max: 4}}, {row_count: {min: 5}, severity: warn}, {row_count_change: {max_drop: 50%, max_rise: 400%, min_baseline: 3}}]`
	require.True(t, checks.New(config.Specs(parse(t, y)), st).CountsOnly())
	require.False(t, checks.New(config.Specs(parse(t, `[{row_count: {min: 1}}, {not_null: [order_id]}]`)), st).CountsOnly())
	extra := map[int64]string{
		4: "",
		2: "DELETE FROM analytics.orders WHERE event_date = '2026-11-01' AND order_id IS NULL OR order_id = 3",
		5: "INSERT INTO analytics.orders VALUES (9, '2026-11-01', 1, 'paid', 1)",
	}
	statuses := map[string]int{}
	for rows, sql := range extra {
		for _, baseline := range []int64{0, 2, 4, 9, 1000} {
			want, err := run(t, db, y, sql, baseline)
			require.NoError(t, err)
			require.EqualValues(t, rows, want[0].Checked)
			got := checks.New(config.Specs(parse(t, y)), st).FromCounts(rows, baseline)
			require.Len(t, got, len(want))
			for i := range want {
				w, g := want[i], got[i]
				w.Duration, g.Duration = 0, 0
				require.Equal(t, w, g, "%d rows replacing %d, check %s", rows, baseline, w.Name)
				statuses[w.Status]++
			}
		}
	}
	for _, s := range []string{"pass", "fail", "warn", "skipped"} {
		require.Positive(t, statuses[s], "the cases cover status %s", s)
	}
}

func TestSeveralChecksOneStatementAndABrokenOne(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, tables)
	outs, err := run(t, db, `[{unique: [order_id]}, {not_null: [order_id]}, {accepted_values: {column: status, values: [paid]}}, {row_count: {min: 1}}]`, "", 0)
	require.NoError(t, err)
	got := map[string]string{}
	for _, o := range outs {
		got[o.Name] = o.Status
	}
	require.Equal(t, map[string]string{"unique(order_id)": "pass", "not_null(order_id)": "fail", "accepted_values(status)": "fail", "row_count": "pass"}, got)

	// A check that errors at run time fails the load naming it.
	_, err = run(t, db, `[{not_null: [order_id]}, {name: ratio, expression: "total / (total - total) > 0"}]`, "", 0)
	var ce *checks.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "ratio", ce.Broken)
	require.True(t, ce.Fatal())
	require.Contains(t, err.Error(), "check_failed: check ratio could not run")
}

// TestScopes: what each strategy's checks look at. merge: the target's rows
// of the keys the source holds (not the rest of the table); append_dedupe:
// the rows this load appended (not an earlier run's).
func TestScopes(t *testing.T) {
	db := audittest.NewDB(t)
	ctx := context.Background()
	_, err := audit.Migrate(ctx, db.Pool) // the strategies call idem's helpers
	require.NoError(t, err)
	db.Exec(t, `CREATE SCHEMA s; CREATE SCHEMA raw;
CREATE TABLE s.c (customer_id int, tier text, day date);
CREATE TABLE s.dim (customer_id int PRIMARY KEY, tier text);
INSERT INTO s.dim VALUES (100, NULL), (101, NULL);               -- old rows outside the load: NULL tiers
INSERT INTO s.c VALUES (1, 'gold', '2026-11-01'), (2, NULL, '2026-11-01'), (3, 'gold', '2026-11-02');
CREATE TABLE raw.ev (event_id int, day date NOT NULL, run_id text, load_seq bigint);
CREATE TABLE s.ev (event_id int, day date);
INSERT INTO s.ev VALUES (1, '2026-11-01'), (2, '2026-11-01');
INSERT INTO raw.ev VALUES (NULL, '2026-11-01', 'old', 1);       -- an earlier run's NULL key`)
	for _, tc := range []struct {
		strategy string
		spec     strategies.Spec
		check    string
		checked  int64
		failing  int64
	}{
		{"merge", strategies.Spec{Dataset: "c", Target: strategies.Table{Schema: "s", Name: "dim"}, Key: []string{"customer_id"},
			Source: "SELECT customer_id, tier FROM s.c WHERE day = @partition"}, `[{not_null: [tier]}]`, 2, 1},
		{"append_dedupe", strategies.Spec{Dataset: "ev", Target: strategies.Table{Schema: "raw", Name: "ev"}, Key: []string{"event_id"},
			View: strategies.Table{Schema: "raw", Name: "latest_ev"}, PartitionColumn: "day", RunIDColumn: "run_id", LoadSeqColumn: "load_seq",
			Source: "SELECT event_id, day FROM s.ev WHERE day = @partition"}, `[{not_null: [event_id]}]`, 2, 0},
	} {
		st, err := strategies.New(tc.strategy, tc.spec)
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return st.Prepare(ctx, tx) }))
		set := checks.New(config.Specs(parse(t, tc.check)), st)
		p := strategies.Params{Partition: "2026-11-01", RunID: "r1"}
		err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := strategies.Load(ctx, tx, st, p)
			require.NoError(t, err)
			outs, err := set.Run(ctx, tx, p, 0)
			require.NoError(t, err)
			require.Equal(t, tc.checked, outs[0].Checked, "%s: rows in scope", tc.strategy)
			require.Equal(t, tc.failing, outs[0].Failing, tc.strategy)
			return pgx.ErrTxClosed
		})
		require.ErrorIs(t, err, pgx.ErrTxClosed)
	}
}

// TestUniqueOnAKeyWithoutAHashFunction: unique first compares the rows with
// the distinct hashes of their keys; a key type without a hash function
// (money) is grouped instead, with the same answer.
func TestUniqueOnAKeyWithoutAHashFunction(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA analytics;
CREATE TABLE analytics.orders (price money, event_date date NOT NULL);
INSERT INTO analytics.orders VALUES ('1.00', '2026-11-01'), ('1.00', '2026-11-01'), ('2.00', '2026-11-01'), (NULL, '2026-11-01'), (NULL, '2026-11-01');`)
	ctx := context.Background()
	st, err := strategies.New("delete_insert", strategies.Spec{Dataset: "orders", Target: strategies.Table{Schema: "analytics", Name: "orders"},
		Source: "SELECT 1 WHERE @partition::date IS NOT NULL", PartitionColumn: "event_date"})
	require.NoError(t, err)
	set := checks.New(config.Specs(parse(t, `[{unique: [price]}, {not_null: [event_date]}]`)), st)
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		outs, err := set.Run(ctx, tx, strategies.Params{Partition: "2026-11-01", RunID: "r1"}, 0)
		require.NoError(t, err)
		require.Equal(t, "fail", outs[0].Status)
		require.EqualValues(t, 1, outs[0].Failing, "one duplicated key value; NULL keys ignored")
		require.Equal(t, "pass", outs[1].Status)
		return pgx.ErrTxClosed
	})
	require.ErrorIs(t, err, pgx.ErrTxClosed)
}
