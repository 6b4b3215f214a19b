package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestDurationsTakeDays(t *testing.T) {
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute, "0d": 0} {
		var d Duration
		require.NoError(t, yaml.Unmarshal([]byte(in), &d), in)
		require.Equal(t, want, d.Std(), in)
	}
	for _, in := range []string{"7", "d", "7x", "-1d", "1d-1h", "7dd"} {
		var d Duration
		err := yaml.Unmarshal([]byte(in), &d)
		require.Error(t, err, in)
		require.Contains(t, err.Error(), "is not a duration", in)
	}
}

func TestFingerprintSQLDefaultsToTheSourceRows(t *testing.T) {
	d := &Dataset{Source: Source{SQL: "SELECT * FROM staging.orders WHERE d = @partition -- the day;\n;"},
		Recheck: &Recheck{Window: Duration(7 * 24 * time.Hour)}}
	sql := d.FingerprintSQL()
	require.True(t, strings.HasPrefix(sql, "SELECT count(*) AS rows, coalesce(sum(hashtextextended(s::text, 0)), 0) AS rows_hash FROM (\n"), sql)
	require.True(t, strings.HasSuffix(sql, "-- the day\n) s"), "a trailing comment cannot swallow the closing parenthesis: %q", sql)
	d.Recheck.Fingerprint = "SELECT max(updated_at) FROM staging.orders WHERE d = @partition"
	require.Equal(t, d.Recheck.Fingerprint, d.FingerprintSQL())
	d.Source = Source{Files: &FilesSource{URL: "file:///l/{partition}/", Format: "csv"}}
	require.Empty(t, d.FingerprintSQL(), "a files source is fingerprinted by its listing")
	require.Empty(t, (&Dataset{}).FingerprintSQL())
}
