package config

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExpectCalendar(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
pipeline: shop
datasets:
  orders:
    strategy: delete_insert
    target: analytics.fact_orders
    partition_column: d
    source: SELECT * FROM staging.orders WHERE d = @partition::date
    expect: {every: day, from: 2026-01-01, deadline: 3h, timezone: Europe/Paris}
  hourly:
    strategy: delete_insert
    target: analytics.hourly
    partition_column: h
    partition_type: timestamp
    source: SELECT * FROM staging.hourly WHERE h = @partition::timestamptz
    expect: {every: hour, from: "2026-01-01T00:00:00Z"}
`), nil)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	e, ok := c.Datasets["orders"].Calendar()
	require.True(t, ok)
	require.Equal(t, 3*time.Hour, e.Deadline)
	require.Equal(t, "Europe/Paris", e.Location.String())
	_, ok = c.Datasets["hourly"].Calendar()
	require.True(t, ok)
}

func TestExpectProblems(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
pipeline: shop
datasets:
  a:
    strategy: delete_insert
    target: analytics.a
    partition_column: d
    source: SELECT * FROM s.a WHERE d = @partition::date
    expect: {every: hour, from: 2026-01-01}
  b:
    strategy: delete_insert
    target: analytics.b
    partition_column: d
    source: SELECT * FROM s.b WHERE d = @partition::date
    expect: {every: day, from: 2026-01-01, timezone: Mars/Olympus}
  c:
    strategy: delete_insert
    target: analytics.c
    partition_column: d
    partition_type: text
    source: SELECT * FROM s.c WHERE d = @partition
    expect: {every: day, from: 2026-01-01}
  d:
    strategy: delete_insert
    target: analytics.d
    partition_column: d
    source: SELECT * FROM s.d WHERE d = @partition::date
    expect: {every: day, from: 2026-13-01}
`), nil)
	require.NoError(t, err)
	var problems Problems
	require.True(t, errors.As(c.Validate(), &problems))
	got := map[string]string{}
	for _, p := range problems {
		got[p.Dataset+"/"+p.Field] = p.Message
	}
	require.Equal(t, map[string]string{
		"a/expect": `from: "2026-01-01" is not an hour; want e.g. 2026-01-01T00:00:00Z`,
		"b/expect": `timezone: "Mars/Olympus" is not a time zone; want an IANA name such as Europe/Paris or UTC`,
		"c/expect": "a calendar needs date or timestamp partitions; partition_type text has no calendar: remove expect",
		"d/expect": `from: "2026-13-01" is not a day; want YYYY-MM-DD`,
	}, got)
}

func TestHTTPToken(t *testing.T) {
	t.Parallel()
	base := "pipeline: p\nhttp:\n  token: %s\ndatasets:\n  a:\n    strategy: delete_insert\n    target: x.a\n    partition_column: d\n    source: SELECT * FROM s.a WHERE d = @partition::date\n"
	c, err := Parse([]byte(fmt.Sprintf(base, "short")), nil)
	require.NoError(t, err)
	var problems Problems
	require.True(t, errors.As(c.Validate(), &problems))
	require.Equal(t, "http.token", problems[0].Field)
	require.NotContains(t, problems.Error(), "short", "the message must not repeat the secret")

	c, err = Parse([]byte(fmt.Sprintf(base, "0123456789abcdef0123")), func(k string) string {
		if k == "IDEM_HTTP_TOKEN" {
			return "from-the-environment-0001"
		}
		return ""
	})
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Equal(t, "from-the-environment-0001", c.HTTP.Token)
}
