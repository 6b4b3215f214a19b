package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const watchYAML = `pipeline: shop
datasets:
  landing:
    strategy: delete_insert
    target: analytics.landing
    partition_column: event_date
    source:
      files: {url: "s3://lake/landing/dt={partition}/", format: csv, ready: {marker: _SUCCESS}}
    watch: %s
`

func parseWatch(t *testing.T, watch string) *Config {
	t.Helper()
	c, err := Parse([]byte(strings.Replace(watchYAML, "%s", watch, 1)), func(string) string { return "" })
	require.NoError(t, err)
	return c
}

func TestWatchDefaults(t *testing.T) {
	t.Parallel()
	c := parseWatch(t, "{}")
	require.NoError(t, c.Validate())
	retries := DefaultWatchRetries
	require.Equal(t, &Watch{Every: DefaultWatchEvery, Last: DefaultWatchLast, Retries: &retries, RetryAfter: Duration(5 * time.Minute)},
		c.Datasets["landing"].Watch)
	require.Equal(t, 3, retries)

	c = parseWatch(t, "{every: 10s, last: 3, notifications: {subject: s3.events.lake}, retries: 0, retry_after: 1m}")
	require.NoError(t, c.Validate())
	never := 0
	require.Equal(t, &Watch{Every: Duration(10 * time.Second), Last: 3, Notifications: &WatchNotifications{Subject: "s3.events.lake"},
		Retries: &never, RetryAfter: Duration(time.Minute)}, c.Datasets["landing"].Watch, "retries: 0 turns them off")
}

func TestWatchProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		watch  string
		mutate func(c *Config)
		field  string
		want   []string
	}{
		{"every too short", "{every: 1s}", nil, "watch.every", []string{"1s; use at least 5s (default 1m0s)"}},
		{"every negative", "{every: -1m}", nil, "watch.every", []string{"use at least 5s"}},
		{"last too many", "{last: 5000}", nil, "watch.last", []string{"5000; use 1 to 1000"}},
		{"last negative", "{last: -1}", nil, "watch.last", []string{"use 1 to 1000"}},
		{"retries negative", "{retries: -1}", nil, "watch.retries", []string{"-1; use 0 (never) to 10 (default 3)"}},
		{"retries too many", "{retries: 11}", nil, "watch.retries", []string{"11; use 0 (never) to 10"}},
		{"retry_after too short", "{retry_after: 30s}", nil, "watch.retry_after", []string{"30s; use 1m0s to 24h0m0s (default 5m0s)"}},
		{"retry_after too long", "{retry_after: 25h}", nil, "watch.retry_after", []string{"25h0m0s; use 1m0s to 24h0m0s"}},
		{"retry_after negative", "{retry_after: -5m}", nil, "watch.retry_after", []string{"use 1m0s to"}},
		{"a SELECT source", "{}", func(c *Config) {
			c.Datasets["landing"].Source = Source{SQL: "SELECT * FROM s WHERE d = @partition"}
		}, "watch", []string{"only a files: source can be watched"}},
		{"text partitions", "{}", func(c *Config) { c.Datasets["landing"].PartitionType = "text" }, "watch", []string{"needs date or timestamp partitions", "partition_type text"}},
		{"notifications on local files", "{notifications: {subject: s3.events}}", func(c *Config) {
			c.Datasets["landing"].Source.Files.URL = "file:///data/landing/dt={partition}/"
		}, "watch.notifications", []string{"only an s3:// source has event notifications"}},
		{"no subject", "{notifications: {}}", nil, "watch.notifications.subject", []string{`"" is not a NATS subject`}},
		{"bad wildcard", "{notifications: {subject: s3.ev*}}", nil, "watch.notifications.subject", []string{"not a NATS subject"}},
		{"> not last", "{notifications: {subject: s3.>.x}}", nil, "watch.notifications.subject", []string{"not a NATS subject"}},
		{"idem's own events", "{notifications: {subject: idem.ready.landing}}", nil, "watch.notifications.subject", []string{"shares subjects with idem.ready.>"}},
		{"a wildcard over idem's", "{notifications: {subject: idem.*.x}}", nil, "watch.notifications.subject", []string{"shares subjects with"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := parseWatch(t, tt.watch)
			if tt.mutate != nil {
				tt.mutate(c)
			}
			err := c.Validate()
			require.Error(t, err)
			var found *Problem
			for i, p := range err.(Problems) {
				if p.Dataset == "landing" && p.Field == tt.field {
					found = &err.(Problems)[i]
				}
			}
			require.NotNil(t, found, "no problem for %s in:\n%v", tt.field, err)
			for _, w := range tt.want {
				require.Contains(t, found.Message, w)
			}
		})
	}
}

func TestSubjectsMeet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		meet bool
	}{
		{"s3.events", "idem.ready.>", false},
		{"idem.ready", "idem.ready.>", false},
		{"idem.ready.x", "idem.ready.>", true},
		{"idem.*.x", "idem.ready.>", true},
		{">", "idem.ready.>", true},
		{"idem.*", "idem.ready.>", false},
		{"a.b", "a.c", false},
	} {
		require.Equal(t, c.meet, subjectsMeet(c.a, c.b), "%s ~ %s", c.a, c.b)
	}
}
