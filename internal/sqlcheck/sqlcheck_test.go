package sqlcheck

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWallClock(t *testing.T) {
	t.Parallel()

	// want lists the findings' names; offsets are checked against the SQL
	// text separately.
	tests := []struct {
		name string
		sql  string
		want []string
	}{
		// Positives.
		{"current_date", "SELECT * FROM t WHERE d = CURRENT_DATE", []string{"CURRENT_DATE"}},
		{"current_date lower case", "select * from t where d = current_date", []string{"current_date"}},
		{"current_time with precision", "SELECT CURRENT_TIME(3)", []string{"CURRENT_TIME"}},
		{"current_timestamp", "SELECT x FROM t WHERE ts < Current_Timestamp", []string{"Current_Timestamp"}},
		{"current_timestamp with precision", "SELECT CURRENT_TIMESTAMP (6)", []string{"CURRENT_TIMESTAMP"}},
		{"localtime", "SELECT LOCALTIME", []string{"LOCALTIME"}},
		{"localtimestamp", "SELECT localtimestamp(0)", []string{"localtimestamp"}},
		{"now", "SELECT * FROM t WHERE ts >= now() - interval '1 day'", []string{"now()"}},
		{"now upper case with space", "SELECT NOW ()", []string{"NOW()"}},
		{"now with comment before paren", "SELECT now/* x */()", []string{"now()"}},
		{"clock_timestamp", "SELECT clock_timestamp()", []string{"clock_timestamp()"}},
		{"statement_timestamp", "SELECT statement_timestamp()", []string{"statement_timestamp()"}},
		{"transaction_timestamp", "SELECT transaction_timestamp()", []string{"transaction_timestamp()"}},
		{"timeofday", "SELECT timeofday()", []string{"timeofday()"}},
		{"pg_catalog.now", "SELECT pg_catalog.now()", []string{"pg_catalog.now()"}},
		{"quoted schema", `SELECT "pg_catalog".now()`, []string{`"pg_catalog".now()`}},
		{"quoted function name", `SELECT "now"()`, []string{`"now"()`}},
		{"literal now", "SELECT * FROM t WHERE ts < 'now'", []string{"'now'"}},
		{"literal today cast", "SELECT 'today'::date", []string{"'today'"}},
		{"typed literal", "SELECT timestamp 'now'", []string{"'now'"}},
		{"typed literal tomorrow padded", "SELECT date '  Tomorrow '", []string{"'  Tomorrow '"}},
		{"literal yesterday upper", "WHERE d = 'YESTERDAY'", []string{"'YESTERDAY'"}},
		{"escape string", `SELECT E'now'::date`, []string{`E'now'`}},
		{"escape string with hex escape", `SELECT E'\x6eow'::date`, []string{`E'\x6eow'`}},
		{"dollar quoted literal", "SELECT $$now$$::timestamptz", []string{"$$now$$"}},
		{"unicode escape string", `SELECT U&'n\006Fw'::date`, []string{`U&'n\006Fw'`}},
		{"continued string", "SELECT 'no'\n'w'::date", []string{"'no'\n'w'"}},
		{"after a string with a quote", "SELECT 'it''s', now()", []string{"now()"}},
		{"after an escaped quote in E string", `SELECT E'it\'s', now()`, []string{"now()"}},
		{"after nested comment", "SELECT /* a /* b */ now() */ now()", []string{"now()"}},
		{"after line comment", "SELECT 1 -- now()\n, CURRENT_DATE", []string{"CURRENT_DATE"}},
		{"several", "SELECT now(), CURRENT_DATE, 'today'::date", []string{"now()", "CURRENT_DATE", "'today'"}},
		{"in a function argument", "SELECT date_trunc('day', now())", []string{"now()"}},
		{"after dollar quoted body", "SELECT $fn$ now() $fn$, now()", []string{"now()"}},

		// Negatives.
		{"partition parameter", "SELECT * FROM staging.orders WHERE event_date = @partition", nil},
		{"pg_sleep", "SELECT pg_sleep(1)", nil},
		{"column now_ts", "SELECT now_ts FROM t", nil},
		{"quoted column now", `SELECT "now" FROM t`, nil},
		{"quoted keyword", `SELECT "current_date" FROM t`, nil},
		{"qualified column", "SELECT x.now_date FROM x", nil},
		{"column label after dot", "SELECT t.current_date FROM t", nil},
		{"column label after AS", "SELECT d AS current_date FROM t", nil},
		{"now without parens is a column", "SELECT now FROM t", nil},
		{"line comment", "SELECT 1 -- now() and CURRENT_DATE", nil},
		{"block comment", "SELECT 1 /* now() */", nil},
		{"nested block comment", "SELECT 1 /* outer /* now() */ CURRENT_DATE */", nil},
		{"longer string", "SELECT 'now is the time'", nil},
		{"string holding a call", "SELECT 'now()'", nil},
		{"string holding keyword", "SELECT 'CURRENT_DATE'", nil},
		{"escape string holding call", `SELECT E'\' now()'`, nil},
		{"dollar quoted code", "SELECT $$ SELECT now() $$", nil},
		{"tagged dollar quote", "SELECT $body$ now() $x$ CURRENT_DATE $body$", nil},
		{"current_setting", "SELECT current_setting('x')", nil},
		{"identifier with dollar", "SELECT a$now FROM t", nil},
		{"positional parameter", "SELECT $1::date", nil},
		{"now inside a name", "SELECT snow(), nowhere() FROM t", nil},
		{"strings not continued on one line", "SELECT 'no' 'w'", nil},
		{"unterminated comment", "SELECT 1 /* now()", nil},
		{"unterminated string", "SELECT 'now() ", nil},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := WallClock(tt.sql)
			var names []string
			for _, f := range got {
				names = append(names, f.Name)
				require.GreaterOrEqual(t, f.Offset, 0)
				require.Less(t, f.Offset, len(tt.sql))
				first := strings.SplitN(strings.TrimSuffix(f.Name, "()"), ".", 2)[0]
				require.True(t, strings.HasPrefix(tt.sql[f.Offset:], first),
					"offset %d of %q does not point at it", f.Offset, f.Name)
			}
			require.Equal(t, tt.want, names)
		})
	}
}

func TestWallClockOffset(t *testing.T) {
	t.Parallel()
	sql := "SELECT a,\n  pg_catalog.now() FROM t WHERE d = 'today'"
	require.Equal(t, []Finding{
		{Name: "pg_catalog.now()", Offset: strings.Index(sql, "pg_catalog")},
		{Name: "'today'", Offset: strings.Index(sql, "'today'")},
	}, WallClock(sql))
}

func TestParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sql  string
		want []string
	}{
		{"both", "SELECT * FROM t WHERE d = @partition AND r = @run_id", []string{"partition", "run_id"}},
		{"distinct in order of first use", "SELECT @b, @a, @b, @a_1", []string{"b", "a", "a_1"}},
		{"underscore start", "SELECT @_x", []string{"_x"}},
		{"after paren and cast", "WHERE d = (@partition)::date", []string{"partition"}},
		{"at start", "@partition", []string{"partition"}},
		{"after comma without space", "f(1,@x)", []string{"x"}},
		{"case kept", "SELECT @Partition", []string{"Partition"}},
		{"name ends at non identifier", "SELECT @p-1", []string{"p"}},
		{"after a string", "SELECT 'a'@x", []string{"x"}},

		{"abs operator", "SELECT @ -5, @-5", nil},
		{"jsonb contains", "WHERE doc @> '{}'", nil},
		{"jsonb contained", "WHERE doc <@ other", nil},
		{"contained without space", "WHERE doc <@other", nil},
		{"after identifier", "SELECT a@b", nil},
		{"after digit", "SELECT 1@x", nil},
		{"in string", "SELECT '@partition'", nil},
		{"in escape string", `SELECT E'\'@partition'`, nil},
		{"in dollar string", "SELECT $$ @partition $$", nil},
		{"in quoted identifier", `SELECT "@partition"`, nil},
		{"in line comment", "SELECT 1 -- @partition", nil},
		{"in block comment", "SELECT 1 /* /* */ @partition */", nil},
		{"digit after at", "SELECT @1", nil},
		{"email in string", "WHERE email = 'a@example.com'", nil},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Params(tt.sql))
		})
	}
}

var paramName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func FuzzLexer(f *testing.F) {
	for _, s := range []string{
		"SELECT * FROM t WHERE d = @partition AND r = @run_id",
		"SELECT now(), CURRENT_DATE, 'today'::date, pg_catalog.now()",
		"SELECT E'\\x6eow', U&'n\\006Fw', U&\"a\\+000061\", $a$ x $a$, $1",
		"SELECT /* /* */ */ 'it''s' -- c\n'a'\n'b' \"q\"\"x\"",
		"x<@y @> @@ @-1 a@b",
		"/*", "'", "E'\\", "$a$", "U&'\\", "\"", "1.e+",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		for _, fd := range WallClock(sql) {
			if fd.Offset < 0 || fd.Offset >= len(sql) || fd.Name == "" {
				t.Fatalf("bad finding %+v for %q", fd, sql)
			}
		}
		seen := map[string]bool{}
		for _, p := range Params(sql) {
			if !paramName.MatchString(p) || seen[p] || !strings.Contains(sql, "@"+p) {
				t.Fatalf("bad param %q for %q", p, sql)
			}
			seen[p] = true
		}
		// Anything hidden in a comment stays hidden.
		if !strings.Contains(sql, "*/") {
			if got := WallClock("SELECT 1 /*" + sql); got != nil {
				t.Fatalf("finding %+v inside a comment", got)
			}
		}
	})
}

func TestReplaceParam(t *testing.T) {
	cases := []struct {
		sql, want string
		n         int
	}{
		{"SELECT * FROM t WHERE d = @partition", "SELECT * FROM t WHERE d = k.p", 1},
		{"SELECT @partition, @partition_text, '@partition' -- @partition\nFROM t WHERE d = @partition /* @partition */",
			"SELECT k.p, @partition_text, '@partition' -- @partition\nFROM t WHERE d = k.p /* @partition */", 2},
		{"SELECT $$@partition$$, x<@partition, \"@partition\"", "SELECT $$@partition$$, x<@partition, \"@partition\"", 0},
		{"SELECT 1", "SELECT 1", 0},
	}
	for _, c := range cases {
		got, n := ReplaceParam(c.sql, "partition", "k.p")
		if got != c.want || n != c.n {
			t.Errorf("ReplaceParam(%q) = %q, %d; want %q, %d", c.sql, got, n, c.want, c.n)
		}
	}
}
