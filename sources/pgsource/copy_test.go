package pgsource

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/localpg"
)

const typedDDL = `CREATE TABLE typed (
  id int PRIMARY KEY, event_date date NOT NULL,
  i int, b bigint, n numeric, f4 real, f8 double precision,
  t text, d date, ts timestamp, tz timestamptz, iv interval,
  by bytea, bo boolean, j jsonb, js json, ia int[], ta text[],
  u uuid, ip inet, m money, x xml, r tstzrange
)`

// typedRows are the values that break a naive copy: text with every COPY
// escape, the string \N beside NULL, all 256 bytes, floats that lose digits
// without extra_float_digits, infinities, BC dates, intervals that print
// differently under each IntervalStyle, timestamps that move with TimeZone,
// JSON whose text must stay as written, arrays with quotes and NULLs, and an
// XML fragment that only xmloption content reads.
const typedRows = `
INSERT INTO typed VALUES
 (1, '2026-11-28', 42, 9223372036854775807, 12345678901234567890.123456789, 3.4028235e38, 0.30000000000000004,
  'plain', '2026-11-28', '2026-11-28 13:14:15.123456', '2026-11-28 13:14:15.123456+05:45', '1 year 2 mons 3 days 04:05:06.789012',
  '\x00ff', true, '{"a": [1, 2.50, null], "b": "é\u00e9x"}', '{ "kept" :  "as written" }', '{1,NULL,3}', '{"a\"b","c\\d",NULL,"","NULL"}',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '192.168.0.1/24', 1234.56, '<a b="1">x</a>', '[2026-11-28 00:00+00,2026-11-29 00:00+00)'),
 (2, '2026-11-28', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (3, '2026-11-28', -2147483648, -1, 'NaN', '-0', 1e-310,
  E'tab\there\nnewline\r\ncr back\\slash \\N not null, unicode ünï ✓ 𝄞 🎉 \\. end', '4713-01-01 BC', '-infinity', 'infinity', '-1 days +02:03:04',
  (SELECT decode(string_agg(lpad(to_hex(i), 2, '0'), ''), 'hex') FROM generate_series(0, 255) i), false, '[]', '[]', '{}', '{}',
  '00000000-0000-0000-0000-000000000000', '::1', -0.01, 'text then <b/>', 'empty'),
 (4, '2026-11-28', 0, 0, '1e-100', 'Infinity', '-Infinity', '', 'infinity', 'infinity', '1999-12-31 23:59:59.999999-12', '-178000000 years',
  '', NULL, '"\ud83c\udf89"', 'null', '{{1,2},{3,4}}', '{"\\\\N","\t"}', NULL, NULL, NULL, NULL, '(,)'),
 (5, '2026-11-29', 5, 5, 5, 5, 5, 'other partition', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO typed (id, event_date, t, f8, by)
  SELECT 100 + g, '2026-11-28', repeat(md5(g::text), 8) || E'\t' || g, g / 7.0, sha256(g::text::bytea)
  FROM generate_series(1, 5000) g;
`

// hostileSettings make every default that changes how values are written
// differ from Copy's pins, on the source and on the destination.
var (
	hostileSource = []string{"DateStyle = 'German, DMY'", "IntervalStyle = 'sql_standard'", "TimeZone = 'Asia/Kathmandu'",
		"extra_float_digits = 0", "bytea_output = 'escape'"}
	hostileDest = []string{"DateStyle = 'SQL, DMY'", "IntervalStyle = 'iso_8601'", "TimeZone = 'America/St_Johns'",
		"extra_float_digits = -15", "xmloption = 'document'"}
)

func TestCopyKeepsEveryValue(t *testing.T) {
	ctx := context.Background()
	src, dst := newDB(t), newDB(t)
	src.Exec(t, typedDDL)
	src.Exec(t, typedRows)
	dst.Exec(t, typedDDL)
	alterDB(t, src, hostileSource...)
	alterDB(t, dst, hostileDest...)
	var f8, tz string
	require.NoError(t, src.Pool.QueryRow(ctx, "SELECT f8::text, tz::text FROM typed WHERE id = 1").Scan(&f8, &tz))
	require.Equal(t, "0.3", f8, "the source's own defaults would lose digits")
	require.Equal(t, "28.11.2026 13:14:15.123456 +0545", tz, "and write German dates")

	tx := begin(t, dst)
	spec := Spec{URL: appURL(primary(t), src.Name), SQL: "SELECT * FROM typed WHERE event_date = @partition"}
	res, err := Copy(ctx, spec, Params{Partition: "2026-11-28", RunID: "r1"}, tx, Target{Table: pgx.Identifier{"public", "typed"}})
	require.NoError(t, err)
	noSecret(t, fmt.Sprintf("%+v", res))
	require.Equal(t, int64(5004), res.Rows)
	require.Equal(t, 1, res.Attempts)
	require.False(t, res.Source.InRecovery)
	require.NotEmpty(t, res.Source.LSN)
	require.NotEmpty(t, res.Source.SystemIdentifier, "pg_control_system() is PUBLIC")
	require.Equal(t, fmt.Sprintf("127.0.0.1:%d/%s", primary(t).Port, src.Name), res.Source.Addr)
	require.Equal(t, fmt.Sprintf("127.0.0.1:%d", primary(t).Port), res.Source.ServerAddr)
	require.GreaterOrEqual(t, res.Source.Version, 150000)
	require.Zero(t, res.Source.ReplayedAt)

	// The destination's own settings are back for the rest of the load.
	var ds string
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('DateStyle'), current_setting('TimeZone')").Scan(&ds, &tz))
	require.Equal(t, "SQL, DMY", ds)
	require.Equal(t, "America/St_Johns", tz)

	q := "SELECT * FROM typed WHERE event_date = '2026-11-28'"
	want := dump(t, src.Pool, q)
	require.Equal(t, want, dump(t, tx, q), "every value arrives as it left")
	require.Contains(t, want, "0.30000000000000004")
	require.Contains(t, want, `\N not null`)
	t.Logf("%d rows, %d bytes of text compared; source %+v", res.Rows, len(want), res.Source)
}

func TestCopyColumnsByName(t *testing.T) {
	ctx := context.Background()
	src, dst := newDB(t), newDB(t)
	src.Exec(t, "CREATE TABLE s (a int, b text); INSERT INTO s VALUES (1, 'one'), (2, 'two')")
	dst.Exec(t, `CREATE TABLE "Odd ""Name""" (id serial, "B col" text, "A col" int)`)
	tx := begin(t, dst)
	spec := Spec{URL: appURL(primary(t), src.Name), SQL: "SELECT b, a FROM s"}
	res, err := Copy(ctx, spec, Params{Partition: "p"}, tx, Target{Table: pgx.Identifier{`Odd "Name"`}, Columns: []string{"B col", "A col"}})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Rows)
	require.Equal(t, "(1,one,1)\n(2,two,2)", dump(t, tx, `SELECT * FROM "Odd ""Name"""`))
}

// The rows come from the snapshot the source transaction took first: a row
// committed after it (here, between the snapshot statement and the COPY)
// is not read, as it would be under READ COMMITTED.
func TestCopyReadsOneSnapshot(t *testing.T) {
	ctx := context.Background()
	src, dst := newDB(t), newDB(t)
	src.Exec(t, "CREATE TABLE e (id int, d date); INSERT INTO e SELECT g, '2026-11-28' FROM generate_series(1, 10) g")
	dst.Exec(t, "CREATE TABLE e (id int, d date)")
	spec := Spec{URL: appURL(primary(t), src.Name), SQL: "SELECT * FROM e WHERE d = @partition"}

	inserted := 0
	testHookAfterSnapshot = func() {
		src.Exec(t, "INSERT INTO e VALUES (11, '2026-11-28')")
		inserted++
	}
	t.Cleanup(func() { testHookAfterSnapshot = nil })
	tx := begin(t, dst)
	res, err := Copy(ctx, spec, Params{Partition: "2026-11-28"}, tx, Target{Table: pgx.Identifier{"e"}})
	require.NoError(t, err)
	require.Equal(t, 1, inserted, "the hook ran between the snapshot and the COPY")
	require.Equal(t, int64(10), res.Rows, "a row committed after the snapshot is not read")
	testHookAfterSnapshot = nil

	tx2 := begin(t, dst)
	res, err = Copy(ctx, spec, Params{Partition: "2026-11-28"}, tx2, Target{Table: pgx.Identifier{"e"}})
	require.NoError(t, err)
	require.Equal(t, int64(11), res.Rows, "the next copy's snapshot has it")
}

// Whatever the partition and run_id hold, they arrive as values: the
// source's tables are intact and the value read back is the value sent.
func TestHostilePartitionsAreValues(t *testing.T) {
	ctx := context.Background()
	src, dst := newDB(t), newDB(t)
	src.Exec(t, "CREATE TABLE victim (id int); INSERT INTO victim VALUES (1); CREATE TABLE ev (d date)")
	dst.Exec(t, "CREATE TABLE got (p text, r text, victims bigint)")
	spec := Spec{URL: appURL(primary(t), src.Name),
		SQL: "SELECT @partition AS p, @run_id AS r, (SELECT count(*) FROM victim) AS victims"}
	for _, v := range hostile {
		tx := begin(t, dst)
		_, err := Copy(ctx, spec, Params{Partition: v, RunID: v + "-run"}, tx, Target{Table: pgx.Identifier{"got"}})
		require.NoError(t, err, "%q", v)
		var p, r string
		var victims int64
		require.NoError(t, tx.QueryRow(ctx, "SELECT p, r, victims FROM got").Scan(&p, &r, &victims))
		require.Equal(t, v, p)
		require.Equal(t, v+"-run", r)
		require.Equal(t, int64(1), victims)
		require.NoError(t, tx.Rollback(ctx))
	}

	// Typed by context: a date compares as a date, and a hostile value is a
	// bad date (a data exception), never a syntax error.
	src.Exec(t, "INSERT INTO ev VALUES ('2026-11-28'), ('2026-11-28'), ('2026-11-29')")
	dst.Exec(t, "CREATE TABLE n (c bigint)")
	spec.SQL = "SELECT count(*) FROM ev WHERE d = @partition"
	tx := begin(t, dst)
	_, err := Copy(ctx, spec, Params{Partition: "2026-11-28"}, tx, Target{Table: pgx.Identifier{"n"}})
	require.NoError(t, err)
	require.Equal(t, "(2)", dump(t, tx, "SELECT * FROM n"))
	for _, v := range hostile[1:] {
		_, err := Copy(ctx, spec, Params{Partition: v}, tx, Target{Table: pgx.Identifier{"n"}})
		var e *Error
		require.True(t, errors.As(err, &e), "%q: %v", v, err)
		require.Equal(t, KindFatal, e.Kind)
		require.Equal(t, ReasonSourceData, e.Reason, "%q: %v", v, err)
		require.Contains(t, []string{"22007", "22008"}, e.SQLState, "%q: %v", v, err)
	}
	src.Exec(t, "SELECT * FROM victim")

	_, err = Copy(ctx, spec, Params{Partition: "a\x00b"}, tx, Target{Table: pgx.Identifier{"n"}})
	var pe *PartitionError
	require.True(t, errors.As(err, &pe))
	require.Equal(t, "(2)", dump(t, tx, "SELECT * FROM n"), "the failed copies left nothing behind")
}

func TestCopyErrors(t *testing.T) {
	ctx := context.Background()
	p := primary(t)
	src, dst := newDB(t), newDB(t)
	src.Exec(t, `CREATE TABLE s (a int, d date); INSERT INTO s VALUES (1, '2026-11-28');
CREATE TABLE w (a int);
CREATE FUNCTION sneaky() RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN INSERT INTO w VALUES (1); RETURN true; END $$;`)
	dst.Exec(t, "CREATE TABLE s (a int, d date); CREATE TABLE narrow (a int)")
	free, err := localpg.FreePort()
	require.NoError(t, err)
	good := appURL(p, src.Name)
	cases := []struct {
		name   string
		url    string
		sql    string
		target string
		kind   Kind
		reason string
		state  string
		says   string
	}{
		{"refused", fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", secret, free, src.Name), "SELECT * FROM s", "s",
			KindUnavailable, "", "", fmt.Sprintf("127.0.0.1:%d/%s", free, src.Name)},
		{"wrong password", fmt.Sprintf("postgres://app:%s-wrong@127.0.0.1:%d/%s?sslmode=disable", secret, p.Port, src.Name), "SELECT * FROM s", "s",
			KindUnavailable, "", "28P01", "password authentication failed"},
		{"no such database", appURL(p, "nope_"+src.Name), "SELECT * FROM s", "s", KindFatal, ReasonSourceConfig, "3D000", "does not exist"},
		{"undefined table", good, "SELECT * FROM missing WHERE d = @partition", "s", KindFatal, ReasonSourceSQL, "42P01", `"missing" does not exist`},
		{"undefined column", good, "SELECT a, nope FROM s", "s", KindFatal, ReasonSourceSQL, "42703", `"nope" does not exist`},
		{"a write inside a function", good, "SELECT a, d FROM s WHERE sneaky()", "s", KindFatal, ReasonSourceSQL, "25006", "read-only transaction"},
		{"not a date", good, "SELECT a, d FROM s WHERE d = @partition", "s", KindFatal, ReasonSourceData, "22007", "invalid input syntax"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := begin(t, dst)
			part := "2026-11-28"
			if c.name == "not a date" {
				part = "not-a-date"
			}
			_, err := Copy(ctx, Spec{URL: c.url, SQL: c.sql}, Params{Partition: part}, tx, Target{Table: pgx.Identifier{c.target}})
			require.Error(t, err)
			noSecret(t, err.Error(), fmt.Sprintf("%#v", err))
			var e *Error
			require.True(t, errors.As(err, &e), "%T %v", err, err)
			require.Equal(t, c.kind, e.Kind, "%v", err)
			require.Equal(t, c.reason, e.Reason)
			require.Equal(t, c.kind == KindFatal, e.Fatal())
			require.Equal(t, c.kind == KindUnavailable, e.SourceUnavailable())
			require.Equal(t, c.state, e.SQLState, "%v", err)
			require.Contains(t, err.Error(), c.says)
			var pgErr *pgconn.PgError
			require.False(t, errors.As(err, &pgErr), "a source error must not pass for the warehouse's")
			require.Equal(t, "(1,2026-11-28)", dumpOr(t, tx), "the load's transaction is usable")
		})
	}

	t.Run("the destination's own error", func(t *testing.T) {
		tx := begin(t, dst)
		_, err := Copy(ctx, Spec{URL: good, SQL: "SELECT a, d FROM s"}, Params{}, tx, Target{Table: pgx.Identifier{"narrow"}})
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%T %v", err, err)
		require.Equal(t, "22P04", pgErr.Code, "extra data after the last column")
		var e *Error
		require.False(t, errors.As(err, &e))
		require.Equal(t, "(1,2026-11-28)", dumpOr(t, tx), "rolled back to the savepoint: usable")
	})

	t.Run("cancelled", func(t *testing.T) {
		tx := begin(t, dst)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := Copy(cctx, Spec{URL: good, SQL: "SELECT a, d FROM s"}, Params{}, tx, Target{Table: pgx.Identifier{"s"}})
		require.ErrorIs(t, err, context.Canceled)
		noSecret(t, err.Error())
	})
}

// dumpOr proves tx still runs statements: it inserts a row into s and reads
// the table back.
func dumpOr(t *testing.T, tx pgx.Tx) string {
	t.Helper()
	_, err := tx.Exec(context.Background(), "INSERT INTO s VALUES (1, '2026-11-28')")
	require.NoError(t, err)
	return dump(t, tx, "SELECT * FROM s")
}
