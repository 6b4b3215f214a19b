package config

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAuditRetention(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		want Retention
	}{
		{"", DefaultAuditRetention},
		{"audit: {}\n", DefaultAuditRetention},
		{"audit: {retention: 30d}\n", Retention{Days: 30}},
		{"audit: {retention: forever}\n", Retention{}},
		{"audit: {retention: 0}\n", Retention{}},
		{"audit: {retention: 0d}\n", Retention{}},
	}
	for _, tt := range tests {
		c, err := Parse([]byte(tt.yaml), nil)
		require.NoError(t, err, tt.yaml)
		require.Equal(t, tt.want, c.AuditRetention(), tt.yaml)
	}
	require.Equal(t, 90*24*time.Hour, DefaultAuditRetention.Std())
	require.True(t, Retention{}.Forever())

	// Written back as read.
	c, err := Parse([]byte("audit: {retention: 30d}\n"), nil)
	require.NoError(t, err)
	require.Contains(t, c.Redacted(), "audit:\n  retention: 30d\n")
	c, err = Parse([]byte("audit: {retention: forever}\n"), nil)
	require.NoError(t, err)
	require.Contains(t, c.Redacted(), "retention: forever\n")
}

func TestAuditRetentionRefused(t *testing.T) {
	t.Parallel()
	for yaml, want := range map[string]string{
		"audit:\n  retention: 90\n":       `line 2: audit.retention: "90" is not a retention; write a number of days such as "90d", or "forever"`,
		"audit:\n  retention: 3 months\n": `line 2: audit.retention: "3 months" is not a retention`,
		"audit:\n  retention: -1d\n":      `"-1d" is not a retention`,
		"audit:\n  retention: 2160h\n":    `"2160h" is not a retention`,
		"audit:\n  retention: [90d]\n":    `line 2: audit.retention: want a retention such as "90d" or "forever", found a list`,
		"audit:\n  retension: 90d\n":      `line 2: audit.retension: unknown key "retension"; did you mean "retention"?`,
	} {
		_, err := Parse([]byte(yaml), nil)
		require.ErrorContains(t, err, want, yaml)
	}

	c := parseSpec(t)
	require.NoError(t, c.Validate())
	for _, days := range []int{1, 6, -3, 40000} {
		c.Audit.Retention = &Retention{Days: days}
		var p Problems
		require.True(t, errors.As(c.Validate(), &p), "%d days", days)
		require.Len(t, p, 1)
		require.Equal(t, "audit.retention", p[0].Field)
		require.Contains(t, p[0].Message, "keep at least 7d")
	}
	for _, days := range []int{0, 7, 365} {
		c.Audit.Retention = &Retention{Days: days}
		require.NoError(t, c.Validate(), "%d days", days)
	}
}
