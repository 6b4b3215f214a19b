package strategies

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// The source, and a target per strategy: plain and partitioned for
// delete_insert, merge on id, append_dedupe with its view.
const schemaSchema = `
CREATE SCHEMA staging;
CREATE SCHEMA analytics;
CREATE SCHEMA idem;
CREATE SEQUENCE idem.load_seq AS bigint;
CREATE FUNCTION idem.outside_partition(got anyelement, want text) RETURNS anyelement
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'outside % %', got, want USING ERRCODE = '22023'; END $$;
CREATE TABLE staging.src (id bigint, event_date date, amount integer);
INSERT INTO staging.src SELECT i, d::date, i * 10 FROM generate_series(1, 4) AS i, generate_series('2026-11-01'::date, '2026-11-03', '1 day') AS d;
CREATE TABLE analytics.di (id bigint, event_date date, amount integer);
CREATE TABLE analytics.dip (id bigint, event_date date NOT NULL, amount integer) PARTITION BY RANGE (event_date);
CREATE TABLE analytics.dip_1 PARTITION OF analytics.dip FOR VALUES FROM ('2026-11-01') TO ('2026-11-02');
CREATE TABLE analytics.dip_2 PARTITION OF analytics.dip FOR VALUES FROM ('2026-11-02') TO ('2026-11-03');
CREATE TABLE analytics.dip_3 PARTITION OF analytics.dip FOR VALUES FROM ('2026-11-03') TO ('2026-11-04');
CREATE TABLE analytics.mg (id bigint, event_date date, amount integer, PRIMARY KEY (id, event_date));
CREATE TABLE analytics.ad (id bigint, event_date date, amount integer, run_id text, load_seq bigint);
`

const schemaSource = "SELECT * FROM staging.src WHERE event_date = @partition"

type schemaCase struct {
	name, strategy, table string
	spec                  func(Spec) Spec
}

var schemaCases = []schemaCase{
	{"delete_insert", "delete_insert", "di", func(s Spec) Spec { s.PartitionColumn = "event_date"; return s }},
	{"delete_insert_partitioned", "delete_insert", "dip", func(s Spec) Spec { s.PartitionColumn = "event_date"; return s }},
	{"merge", "merge", "mg", func(s Spec) Spec { s.Key = []string{"id", "event_date"}; return s }},
	{"append_dedupe", "append_dedupe", "ad", func(s Spec) Spec {
		s.Key, s.PartitionColumn, s.View = []string{"id"}, "event_date", Table{Schema: "analytics", Name: "ad_latest"}
		return s
	}},
}

func newSchemaStrategy(t *testing.T, db *pgtest.DB, c schemaCase, policy string) Strategy {
	t.Helper()
	s, err := New(c.strategy, c.spec(Spec{Dataset: "ds", Target: Table{Schema: "analytics", Name: c.table}, Source: schemaSource, OnSchemaChange: policy}))
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(t.Context(), db.Pool, func(tx pgx.Tx) error { return s.Prepare(t.Context(), tx) }))
	return s
}

// loadIn runs one load of day in its own transaction, with the plan's
// schema changes.
func loadIn(ctx context.Context, db *pgtest.DB, s Strategy, day string) ([]SchemaChange, error) {
	var changes []SchemaChange
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		pl := s.Describe(b, Params{Partition: day, RunID: "r-" + day})
		if err := send(ctx, tx, b); err != nil {
			return err
		}
		_, err := s.Execute(ctx, tx, pl, Params{Partition: day, RunID: "r-" + day})
		changes = pl.SchemaChanges()
		var sc *SchemaChangeError
		if errors.As(err, &sc) {
			changes = sc.Changes
		}
		return err
	})
	return changes, err
}

func columnsOf(t *testing.T, db *pgtest.DB, rel string) map[string]string {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(), `SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
	  WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, rel)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var n, ty string
		require.NoError(t, rows.Scan(&n, &ty))
		out[n] = ty
	}
	require.NoError(t, rows.Err())
	return out
}

func actions(cs []SchemaChange) map[string]string {
	out := map[string]string{}
	for _, c := range cs {
		out[c.Column+"/"+c.Change] = c.Action
	}
	return out
}

// A source that gains a column between two loads of the same process
// (the catalog cached by the first): each policy on each strategy.
func TestSourceGainsAColumn(t *testing.T) {
	for _, c := range schemaCases {
		for _, policy := range SchemaPolicies() {
			t.Run(c.name+"/"+policy, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				db := pgtest.NewDB(t)
				db.Exec(t, schemaSchema)
				s := newSchemaStrategy(t, db, c, policy)
				changes, err := loadIn(ctx, db, s, "2026-11-01")
				require.NoError(t, err)
				require.Empty(t, changes, "the columns match")

				db.Exec(t, `ALTER TABLE staging.src ADD COLUMN note varchar(20); UPDATE staging.src SET note = 'n' || id`)
				changes, err = loadIn(ctx, db, s, "2026-11-02")
				target := "analytics." + c.table
				switch policy {
				case OnSchemaChangeFail:
					var sc *SchemaChangeError
					require.ErrorAs(t, err, &sc)
					require.Equal(t, "schema_mismatch", sc.Err.Reason)
					require.Contains(t, err.Error(), `new column note character varying(20)`)
					require.Contains(t, err.Error(), `ALTER TABLE "analytics"."`+c.table+`" ADD COLUMN "note" character varying(20)`)
					require.Contains(t, err.Error(), "idem dlq replay --reason schema_mismatch ds")
					require.Equal(t, map[string]string{"note/new_column": ActionRefused}, actions(changes))
					require.NotContains(t, columnsOf(t, db, target), "note")
					require.Zero(t, db.Int(t, "SELECT count(*) FROM "+target+" WHERE event_date = '2026-11-02'"))
				case OnSchemaChangeIgnore:
					require.NoError(t, err)
					require.Equal(t, map[string]string{"note/new_column": ActionIgnored}, actions(changes))
					require.NotContains(t, columnsOf(t, db, target), "note")
					require.Equal(t, int64(4), db.Int(t, "SELECT count(*) FROM "+target+" WHERE event_date = '2026-11-02'"))
				default:
					require.NoError(t, err)
					require.Equal(t, map[string]string{"note/new_column": ActionAdded}, actions(changes))
					require.Equal(t, "character varying(20)", columnsOf(t, db, target)["note"])
					require.Equal(t, int64(4), db.Int(t, "SELECT count(*) FROM "+target+" WHERE event_date = '2026-11-02' AND note = 'n' || id"))
					require.Equal(t, int64(4), db.Int(t, "SELECT count(*) FROM "+target+" WHERE event_date = '2026-11-01' AND note IS NULL"),
						"rows loaded before keep NULL")
					if c.strategy == "append_dedupe" {
						require.Contains(t, columnsOf(t, db, "analytics.ad_latest"), "note", "the view shows the new column")
						require.Equal(t, int64(4), db.Int(t, "SELECT count(*) FROM analytics.ad_latest WHERE note IS NOT NULL"))
					}
					// The next load finds the column there: nothing to change.
					changes, err = loadIn(ctx, db, s, "2026-11-03")
					require.NoError(t, err)
					require.Empty(t, changes)
				}
			})
		}
	}
}

// sync_all_columns widens a column to the source's wider type of the same
// family, and refuses one that would narrow or convert it; the others
// load the retyped column with a cast, as before.
func TestRetypedColumn(t *testing.T) {
	for _, c := range schemaCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.NewDB(t)
			db.Exec(t, schemaSchema)
			target := "analytics." + c.table
			db.Exec(t, `ALTER TABLE staging.src ALTER COLUMN amount TYPE bigint`)
			for _, policy := range []string{OnSchemaChangeFail, OnSchemaChangeIgnore, OnSchemaChangeAppend} {
				changes, err := loadIn(ctx, db, newSchemaStrategy(t, db, c, policy), "2026-11-01")
				require.NoError(t, err, policy)
				require.Empty(t, changes, policy)
				require.Equal(t, "integer", columnsOf(t, db, target)["amount"], policy)
			}
			sync := newSchemaStrategy(t, db, c, OnSchemaChangeSync)
			changes, err := loadIn(ctx, db, sync, "2026-11-01")
			require.NoError(t, err)
			require.Equal(t, map[string]string{"amount/retyped": ActionWidened}, actions(changes))
			require.Equal(t, "integer", changes[0].OldType)
			require.Equal(t, "bigint", changes[0].NewType)
			require.Equal(t, "bigint", columnsOf(t, db, target)["amount"])

			// Narrowing: the source's amount is smallint now.
			db.Exec(t, `ALTER TABLE staging.src ALTER COLUMN amount TYPE smallint`)
			changes, err = loadIn(ctx, db, sync, "2026-11-02")
			var sc *SchemaChangeError
			require.ErrorAs(t, err, &sc)
			require.Contains(t, err.Error(), "never narrows")
			require.Equal(t, map[string]string{"amount/retyped": ActionRefused}, actions(changes))
			require.Equal(t, "bigint", columnsOf(t, db, target)["amount"])

			// Another family: text.
			db.Exec(t, `ALTER TABLE staging.src ALTER COLUMN amount TYPE text`)
			_, err = loadIn(ctx, db, sync, "2026-11-02")
			require.ErrorAs(t, err, &sc)
			require.Contains(t, err.Error(), "bigint to text is not a widening")
		})
	}
}

// A column the source stops returning stays in the target, NULL in new
// rows, and is reported under sync_all_columns.
func TestDroppedSourceColumn(t *testing.T) {
	for _, c := range schemaCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.NewDB(t)
			db.Exec(t, schemaSchema)
			s := newSchemaStrategy(t, db, c, OnSchemaChangeSync)
			_, err := loadIn(ctx, db, s, "2026-11-01")
			require.NoError(t, err)
			db.Exec(t, `ALTER TABLE staging.src DROP COLUMN amount`)
			changes, err := loadIn(ctx, db, s, "2026-11-02")
			require.NoError(t, err)
			require.Equal(t, map[string]string{"amount/missing_column": ActionKept}, actions(changes))
			target := "analytics." + c.table
			require.Contains(t, columnsOf(t, db, target), "amount")
			require.Equal(t, int64(4), db.Int(t, "SELECT count(*) FROM "+target+" WHERE event_date = '2026-11-02' AND amount IS NULL"))
			require.Equal(t, int64(4), db.Int(t, "SELECT count(*) FROM "+target+" WHERE event_date = '2026-11-01' AND amount IS NOT NULL"))
		})
	}
}

// A reader holding the target: the ALTER gives up after LockTimeout with
// SQLSTATE 55P03, transient, and nothing is half changed; once the
// reader is gone the same load goes through.
func TestSchemaChangeLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, schemaSchema)
	s := newSchemaStrategy(t, db, schemaCases[0], OnSchemaChangeAppend)
	db.Exec(t, `ALTER TABLE staging.src ADD COLUMN note text`)
	reader, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = reader.Exec(ctx, "SELECT count(*) FROM analytics.di")
	require.NoError(t, err)
	start := time.Now()
	_, err = loadIn(ctx, db, s, "2026-11-01")
	require.Error(t, err)
	require.True(t, isLockTimeout(err), "%v", err)
	require.False(t, errors.As(err, new(*SchemaChangeError)), "not fatal")
	require.Contains(t, err.Error(), "retried later")
	require.Less(t, time.Since(start), LockTimeout+20*time.Second)
	require.NotContains(t, columnsOf(t, db, "analytics.di"), "note")
	require.NoError(t, reader.Rollback(ctx))
	changes, err := loadIn(ctx, db, s, "2026-11-01")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"note/new_column": ActionAdded}, actions(changes))
}

// A role that may write the target but does not own it: the change is
// refused as fatal, naming the owner and the GRANT that lets idem's role
// make it, and nothing is altered; a prediction says the same; once the
// role is a member of the owner, the same load adds the column.
func TestSchemaChangeByARoleThatDoesNotOwnTheTarget(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, schemaSchema)
	role, owner := db.Name+"_loader", db.Name+"_owner"
	db.Exec(t, `CREATE ROLE `+role+`; CREATE ROLE `+owner+`;
		GRANT USAGE ON SCHEMA staging, analytics, idem TO `+role+`;
		GRANT SELECT ON staging.src TO `+role+`;
		GRANT SELECT, INSERT, DELETE ON analytics.di TO `+role+`;
		ALTER TABLE analytics.di OWNER TO `+owner)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.WithoutCancel(ctx), `DROP OWNED BY `+role+`, `+owner+`; DROP ROLE `+role+`; DROP ROLE `+owner)
	})
	s := newSchemaStrategy(t, db, schemaCases[0], OnSchemaChangeAppend)
	db.Exec(t, `ALTER TABLE staging.src ADD COLUMN note text`)
	asRole := func(f func(tx pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
				return err
			}
			return f(tx)
		})
	}
	p := Params{Partition: "2026-11-01", RunID: "r1"}
	err := asRole(func(tx pgx.Tx) error { _, err := Load(ctx, tx, s, p); return err })
	var sc *SchemaChangeError
	require.ErrorAs(t, err, &sc)
	require.True(t, sc.Fatal())
	require.Contains(t, err.Error(), `GRANT "`+owner+`" TO "`+role+`"`)
	require.Contains(t, err.Error(), "idem dlq replay --reason schema_mismatch ds")
	require.Equal(t, map[string]string{"note/new_column": ActionRefused}, actions(sc.Changes))
	require.NotContains(t, columnsOf(t, db, "analytics.di"), "note")

	// A NOINHERIT role (as deploy/postgres/grants.sql makes idem_loader)
	// gains nothing from membership: it is told to own the table.
	db.Exec(t, `ALTER ROLE `+role+` NOINHERIT; GRANT `+owner+` TO `+role)
	err = asRole(func(tx pgx.Tx) error { _, err := Predict(ctx, tx, s, p); return err })
	require.ErrorAs(t, err, &sc)
	require.Contains(t, err.Error(), `ALTER TABLE "analytics"."di" OWNER TO "`+role+`"`)
	db.Exec(t, `REVOKE `+owner+` FROM `+role+`; ALTER ROLE `+role+` INHERIT`)

	err = asRole(func(tx pgx.Tx) error { _, err := Predict(ctx, tx, s, p); return err })
	require.ErrorAs(t, err, &sc, "the prediction names the missing grant too")
	require.Contains(t, err.Error(), `GRANT "`+owner+`" TO "`+role+`"`)

	db.Exec(t, `GRANT `+owner+` TO `+role)
	require.NoError(t, asRole(func(tx pgx.Tx) error { _, err := Load(ctx, tx, s, p); return err }))
	require.Contains(t, columnsOf(t, db, "analytics.di"), "note")
}

// Two loads of two partitions meeting the same new column at once: one
// adds it, the other finds it added (or retries on the lock), none fails
// fatally; a reader meanwhile never sees the column without the rows of
// the load that added it.
func TestConcurrentSchemaChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, schemaSchema)
	c := schemaCases[0]
	_, err := loadIn(ctx, db, newSchemaStrategy(t, db, c, OnSchemaChangeAppend), "2026-11-01")
	require.NoError(t, err)
	db.Exec(t, `ALTER TABLE staging.src ADD COLUMN note text; UPDATE staging.src SET note = 'n'`)

	var stop atomic.Bool
	var torn atomic.Int64
	var reads sync.WaitGroup
	reads.Add(1)
	go func() {
		defer reads.Done()
		for !stop.Load() {
			var hasNote bool
			var noteRows, other int64
			// One statement, one snapshot: the catalog and the rows.
			err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'analytics.di'::regclass AND attname = 'note' AND NOT attisdropped),
			       (SELECT count(*) FROM analytics.di WHERE event_date IN ('2026-11-02', '2026-11-03')),
			       (SELECT count(*) FROM analytics.di WHERE event_date = '2026-11-01')`).Scan(&hasNote, &noteRows, &other)
			if err != nil {
				continue
			}
			if hasNote && noteRows == 0 || other != 4 {
				torn.Add(1)
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, day := range []string{"2026-11-02", "2026-11-03"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSchemaStrategy(t, db, c, OnSchemaChangeAppend) // a replica of its own
			for range 5 {
				if _, errs[i] = loadIn(ctx, db, s, day); errs[i] == nil || !isLockTimeout(errs[i]) {
					return
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	reads.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Zero(t, torn.Load(), "a reader saw the new column without the rows that brought it")
	require.Equal(t, int64(8), db.Int(t, "SELECT count(*) FROM analytics.di WHERE note = 'n'"))
	require.Equal(t, int64(1), db.Int(t, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'analytics.di'::regclass AND attname = 'note'"))
}

// Predict says what a load would meet and do, and changes nothing.
func TestPredictSchemaChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, schemaSchema)
	db.Exec(t, `ALTER TABLE staging.src ADD COLUMN note text`)
	for policy, want := range map[string]string{OnSchemaChangeFail: ActionRefused, OnSchemaChangeIgnore: ActionIgnored, OnSchemaChangeAppend: ActionAdded} {
		s := newSchemaStrategy(t, db, schemaCases[0], policy)
		var changes []SchemaChange
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			changes, err = Predict(ctx, tx, s, Params{Partition: "2026-11-01", RunID: "r"})
			if policy == OnSchemaChangeFail {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"note/new_column": want}, actions(changes), policy)
		require.NotContains(t, columnsOf(t, db, "analytics.di"), "note", policy)
	}
}

// A strategy whose catalog cache a load filled, then a source that gains a
// column: the prediction reads the catalog afresh and still alters nothing
// (a plan re-read from a stale cache keeps its dry mode).
func TestPredictOnAStaleCacheAltersNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, schemaSchema)
	s := newSchemaStrategy(t, db, schemaCases[0], OnSchemaChangeAppend)
	_, err := loadIn(ctx, db, s, "2026-11-01")
	require.NoError(t, err)
	db.Exec(t, `ALTER TABLE staging.src ADD COLUMN note text; ALTER TABLE analytics.di ADD COLUMN extra int`)
	var changes []SchemaChange
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		changes, err = Predict(ctx, tx, s, Params{Partition: "2026-11-02", RunID: "r"})
		return err
	}))
	require.Equal(t, ActionAdded, actions(changes)["note/new_column"])
	require.NotContains(t, columnsOf(t, db, "analytics.di"), "note", "committed, and still not altered")
}
