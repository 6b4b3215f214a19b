package pgsource

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// secret is the password in every URL the tests hand to the package: no
// error, message or result may ever contain it.
const secret = "s3cr3t-Pa55word"

func noSecret(t *testing.T, texts ...string) {
	t.Helper()
	for _, s := range texts {
		require.NotContains(t, s, secret, "the password leaked")
	}
}

func TestValidate(t *testing.T) {
	ok := Spec{URL: "postgres://app:" + secret + "@db.internal:5433/shop?sslmode=disable", SQL: "SELECT * FROM orders WHERE event_date = @partition"}
	require.NoError(t, ok.Validate())

	cases := []struct {
		name   string
		change func(*Spec)
		field  string
		reason string
		says   string
	}{
		{"no url", func(s *Spec) { s.URL = "" }, "url", ReasonSourceConfig, "required"},
		{"not a url", func(s *Spec) { s.URL = "host=db password=" + secret }, "url", ReasonSourceConfig, "not a postgres://"},
		{"bad port", func(s *Spec) { s.URL = "postgres://app:" + secret + "@db:99999999/shop" }, "url", ReasonSourceConfig, "cannot use"},
		{"no database", func(s *Spec) { s.URL = "postgres://app:" + secret + "@db:5432" }, "url", ReasonSourceConfig, "names no database"},
		{"no sql", func(s *Spec) { s.SQL = " " }, "sql", ReasonSourceConfig, "required"},
		{"now()", func(s *Spec) { s.SQL = "SELECT * FROM orders WHERE created_at > now() - interval '1 day'" }, "sql", ReasonWallClockSQL, "now()"},
		{"CURRENT_DATE", func(s *Spec) { s.SQL = "SELECT * FROM orders WHERE event_date = CURRENT_DATE" }, "sql", ReasonWallClockSQL, "CURRENT_DATE"},
		{"current_timestamp", func(s *Spec) { s.SQL = "SELECT current_timestamp AS t" }, "sql", ReasonWallClockSQL, "current_timestamp"},
		{"clock_timestamp()", func(s *Spec) { s.SQL = "SELECT clock_timestamp() AS t" }, "sql", ReasonWallClockSQL, "clock_timestamp()"},
		{"localtimestamp", func(s *Spec) { s.SQL = "SELECT LOCALTIMESTAMP AS t" }, "sql", ReasonWallClockSQL, "LOCALTIMESTAMP"},
		{"'today'", func(s *Spec) { s.SQL = "SELECT * FROM orders WHERE event_date = 'today'::date" }, "sql", ReasonWallClockSQL, "'today'"},
		{"second statement", func(s *Spec) { s.SQL = "SELECT 1; DROP TABLE orders" }, "sql", ReasonSourceConfig, "semicolon"},
		{"a write", func(s *Spec) { s.SQL = "WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d" }, "sql", ReasonSourceConfig, "DELETE"},
		{"not a select", func(s *Spec) { s.SQL = "TABLE orders" }, "sql", ReasonSourceConfig, "must be a SELECT"},
		{"unknown argument", func(s *Spec) { s.SQL = "SELECT * FROM orders WHERE d = @partiton" }, "sql", ReasonSourceConfig, "@partiton"},
		{"operator-like argument", func(s *Spec) { s.SQL = "SELECT * FROM orders WHERE tags<@partition" }, "sql", ReasonSourceConfig, "put a space"},
		{"invalid utf-8", func(s *Spec) { s.SQL = "SELECT '\xff' AS x" }, "sql", ReasonSourceConfig, "UTF-8"},
		{"negative lag", func(s *Spec) { s.MaxReplicaLag = -time.Second }, "max_replica_lag", ReasonSourceConfig, "negative"},
		{"retries below -1", func(s *Spec) { s.RecoveryConflictRetries = -2 }, "recovery_conflict_retries", ReasonSourceConfig, "-2"},
		{"retries unbounded", func(s *Spec) { s.RecoveryConflictRetries = 1000 }, "recovery_conflict_retries", ReasonSourceConfig, "hot_standby_feedback"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := ok
			c.change(&s)
			err := s.Validate()
			require.Error(t, err)
			noSecret(t, err.Error())
			var se *SpecError
			require.True(t, errors.As(err, &se), "%T", err)
			require.Equal(t, c.field, se.Field)
			require.Equal(t, c.reason, se.FatalReason())
			require.True(t, se.Fatal())
			require.Contains(t, err.Error(), c.says)
		})
	}
}

func TestValidateAcceptsWhatLooksLikeTheClock(t *testing.T) {
	for _, sql := range []string{
		"SELECT now_ts FROM t WHERE d = @partition",
		"SELECT * FROM t WHERE note = 'now is the time' AND d = @partition -- not now()",
		"SELECT o.current_date FROM t o WHERE o.d = @partition AND o.tags @> ARRAY['x']",
		"SELECT $$ @partition $$ AS not_an_argument, @run_id AS r",
		"WITH x AS (SELECT 1 AS a) SELECT a FROM x /* @partition inside /* a nested */ comment */",
	} {
		require.NoError(t, Spec{URL: "postgres://h/db", SQL: sql}.Validate(), sql)
	}
}

func TestAddr(t *testing.T) {
	require.Equal(t, "db.internal:5433/shop", Spec{URL: "postgres://app:" + secret + "@db.internal:5433/shop"}.Addr())
	require.Equal(t, "a:5432/shop (+1 fallback hosts)", Spec{URL: "postgres://app:" + secret + "@a,b/shop"}.Addr())
	require.Equal(t, "(unparsable url)", Spec{URL: "postgres://app:" + secret + "@db:bad/shop"}.Addr())
}

func TestWithDefaults(t *testing.T) {
	require.Equal(t, DefaultRecoveryConflictRetries, Spec{}.WithDefaults().RecoveryConflictRetries)
	require.Equal(t, DefaultRecoveryConflictRetries, Spec{}.retries())
	require.Equal(t, 0, Spec{RecoveryConflictRetries: NoRecoveryConflictRetries}.retries())
	require.Equal(t, 5, Spec{RecoveryConflictRetries: 5}.retries())
}

func TestScrubSecret(t *testing.T) {
	got := scrubSecret("a "+secret+" b "+strings.ReplaceAll(secret, "$", "%24"), secret)
	noSecret(t, got)
	require.Equal(t, "x", scrubSecret("x", ""))
}

func TestURLProblemsNameTheFixNotTheURL(t *testing.T) {
	for url, says := range map[string]string{
		"postgres://app:" + secret + "@db:bad/shop":           "invalid port",
		"postgres://app:" + secret + "@db/shop?sslmode=bogus": "sslmode is invalid",
		"postgres://app:" + secret + "@[::1/shop":             "IPv6",
	} {
		err := Spec{URL: url, SQL: "SELECT 1 AS a"}.Validate()
		require.ErrorContains(t, err, says)
		noSecret(t, err.Error())
		require.NotContains(t, err.Error(), "app:")
	}
}
