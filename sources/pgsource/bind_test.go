package pgsource

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hostile are partition values that would be SQL if they were spliced in
// unquoted or quoted naively.
var hostile = []string{
	"2026-11-28",
	"x'; DROP TABLE victim; --",
	"' OR '1'='1",
	`\'; DROP TABLE victim; --`,
	`back\slash\\`,
	"$$; DROP TABLE victim; $$",
	"$tag$ ) TO STDOUT; DROP TABLE victim; --",
	"*/ DROP TABLE victim; /*",
	"semi;colon",
	"line\nbreak\r\n-- comment",
	"tab\there",
	`"quoted ident"`,
	"@partition @run_id",
	"U&'\\0041'",
	"ünïcødé ✓ 𝄞 emoji 🎉",
	"",
	" ",
}

func TestLiteralHoldsNothingThatEndsAContext(t *testing.T) {
	for _, v := range hostile {
		lit, err := literal("partition", v)
		require.NoError(t, err)
		body := lit[strings.Index(lit, "'")+1 : len(lit)-1]
		for _, bad := range []string{"'", "$", "*", ";", "\n", "\r", `"`} {
			require.NotContains(t, body, bad, "literal %s of %q", lit, v)
		}
		require.True(t, strings.HasPrefix(lit, "'") || strings.HasPrefix(lit, "U&'"), lit)
	}
	lit, _ := literal("partition", "2026-11-28")
	require.Equal(t, "'2026-11-28'", lit)
	lit, _ = literal("partition", "O'Brien;")
	require.Equal(t, `U&'O\0027Brien\003b'`, lit)
	lit, _ = literal("partition", "𝄞")
	require.Equal(t, `U&'\+01d11e'`, lit)
}

func TestLiteralRefusesNULAndInvalidUTF8(t *testing.T) {
	for _, v := range []string{"a\x00b", "\xff\xfe"} {
		_, err := literal("partition", v)
		var pe *PartitionError
		require.True(t, errors.As(err, &pe))
		require.True(t, pe.Fatal())
		require.Equal(t, "partition", pe.Field)
	}
}

func TestBind(t *testing.T) {
	p := Params{Partition: "2026-11-28", RunID: "run'1"}
	cases := []struct{ sql, want string }{
		{"SELECT * FROM t WHERE d = @partition", "SELECT * FROM t WHERE d = '2026-11-28'"},
		{"SELECT @run_id AS r, @partition::date AS d, @partition AS again", `SELECT U&'run\00271' AS r, '2026-11-28'::date AS d, '2026-11-28' AS again`},
		// Strings, dollar quotes, quoted names and comments keep their @.
		{"SELECT '@partition', E'\\'@partition', $x$ @partition $x$, \"@partition\" -- @partition\n, 1 /* /* @partition */ @partition */",
			"SELECT '@partition', E'\\'@partition', $x$ @partition $x$, \"@partition\" -- @partition\n, 1 /* /* @partition */ @partition */"},
		{"SELECT a FROM t WHERE d=@partition\n-- trailing comment", "SELECT a FROM t WHERE d='2026-11-28'\n-- trailing comment"},
		{"SELECT x@>'{}' FROM t WHERE d=@partition_x", "SELECT x@>'{}' FROM t WHERE d=@partition_x"},
	}
	for _, c := range cases {
		if strings.Contains(c.sql, "@partition_x") {
			_, err := bind(c.sql, p)
			require.Error(t, err, "an argument idem does not bind")
			continue
		}
		got, err := bind(c.sql, p)
		require.NoError(t, err, c.sql)
		require.Equal(t, c.want, got)
	}
}

func TestPgxAndSqlcheckAgree(t *testing.T) {
	require.Equal(t, []string{"partition", "run_id"}, pgxParams("SELECT @partition, '@x', @run_id, @partition"))
	require.Empty(t, checkSQL("SELECT 1 AS a FROM t WHERE d = @partition AND r = @run_id", "rows"))
	// pgx binds x<@partition; sqlcheck reads the <@ operator.
	require.NotEmpty(t, checkSQL("SELECT 1 AS a FROM t WHERE tags<@partition", "rows"))
}

// unquote reads back a literal made by literal: the inverse PostgreSQL
// applies to '...' and U&'...' with the default escape.
func unquote(t *testing.T, lit string) string {
	t.Helper()
	if body, ok := strings.CutPrefix(lit, "'"); ok {
		return strings.TrimSuffix(body, "'")
	}
	body := strings.TrimSuffix(strings.TrimPrefix(lit, "U&'"), "'")
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			b.WriteByte(body[i])
			continue
		}
		n := 4
		if body[i+1] == '+' {
			n, i = 6, i+1
		}
		r, err := strconv.ParseUint(body[i+1:i+1+n], 16, 32)
		require.NoError(t, err)
		b.WriteRune(rune(r))
		i += n
	}
	return b.String()
}

// Any value binds to a literal that reads back as the value, whose body
// holds no quote, and lands where the @name stood.
func FuzzBind(f *testing.F) {
	for _, v := range hostile {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, partition string) {
		out, err := bind("SELECT @partition AS p -- @partition", Params{Partition: partition})
		if err != nil {
			var pe *PartitionError
			require.True(t, errors.As(err, &pe))
			return
		}
		lit, ok := strings.CutPrefix(out, "SELECT ")
		require.True(t, ok)
		lit, ok = strings.CutSuffix(lit, " AS p -- @partition")
		require.True(t, ok, out)
		require.Equal(t, partition, unquote(t, lit))
		body := lit[strings.Index(lit, "'")+1 : len(lit)-1]
		require.NotContains(t, body, "'")
	})
}
