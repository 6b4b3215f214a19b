package watch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
)

func TestNewestListsTheCurrentPartitionAndThoseBefore(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 13, 20, 0, 0, time.UTC)
	days := calendarOf(schemas.PartitionDate, nil)
	require.Equal(t, []string{"2026-11-26", "2026-11-27", "2026-11-28"}, Newest(days, 3, now))
	hours := calendarOf(schemas.PartitionHour, nil)
	require.Equal(t, []string{"2026-11-28T12:00:00Z", "2026-11-28T13:00:00Z"}, Newest(hours, 2, now))

	// A calendar's own: its first partition bounds the list, its zone
	// says which day it is.
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	own := calendar.Expect{Every: calendar.Day, From: "2026-11-28", Location: paris}
	require.Equal(t, []string{"2026-11-28", "2026-11-29"}, Newest(own, 7, time.Date(2026, 11, 28, 23, 30, 0, 0, time.UTC)))

	require.True(t, expected(days, "2020-01-01", now), "a notification may name an old partition")
	require.True(t, expected(days, "2026-11-28", now))
	require.False(t, expected(days, "2026-11-29", now), "never one to come")
	require.False(t, expected(own, "2026-11-27", now), "nor one before the calendar")
	require.False(t, expected(days, "2026-11-28T00:00:00Z", now))
}

func TestMatcherFindsThePartitionOfAKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		url  string
		typ  schemas.PartitionType
		key  string
		want string // "" for none
	}{
		{"s3://lake/orders/dt={partition}/", schemas.PartitionDate, "orders/dt=2026-11-28/part-1.csv", "2026-11-28"},
		{"s3://lake/orders/dt={partition}/", schemas.PartitionDate, "orders/dt=2026-11-28/_SUCCESS", "2026-11-28"},
		{"s3://lake/orders/dt={partition}/", schemas.PartitionDate, "orders/dt=2026-11-28/sub/part-1.csv", "2026-11-28"},
		{"s3://lake/orders/dt={partition}/", schemas.PartitionDate, "orders/dt=2026-11-28", ""},
		{"s3://lake/orders/dt={partition}/", schemas.PartitionDate, "orders/dt=2026-02-30/a.csv", ""},
		{"s3://lake/orders/dt={partition}/", schemas.PartitionDate, "orders/dt=../a.csv", ""},
		{"s3://lake/orders/dt={partition}/", schemas.PartitionDate, "other/dt=2026-11-28/a.csv", ""},
		{"s3://lake/orders/{partition:%Y/%m/%d}/", schemas.PartitionDate, "orders/2026/11/28/a.csv", "2026-11-28"},
		{"s3://lake/orders/{partition:%Y/%m/%d}/", schemas.PartitionDate, "orders/2026/11/31/a.csv", ""},
		{"s3://lake/c/y={partition:%Y}/d={partition:%j}/h={partition:%H}/", schemas.PartitionHour, "c/y=2026/d=332/h=13/a.csv", "2026-11-28T13:00:00Z"},
		{"s3://lake/c/{partition}/", schemas.PartitionHour, "c/2026-11-28T13:00:00Z/a.csv", "2026-11-28T13:00:00Z"},
		{"s3://lake/c/{partition}/", schemas.PartitionHour, "c/2026-11-28T13/a.csv", ""}, // not the prefix a load lists
	}
	for _, c := range cases {
		spec := files.Spec{URL: c.url, Format: files.CSV}
		require.NoError(t, spec.Validate())
		m, err := newMatcher(spec, c.typ)
		require.NoError(t, err)
		p, ok := m.partition("lake", c.key)
		require.Equal(t, c.want != "", ok, "%s in %s", c.key, c.url)
		require.Equal(t, c.want, p.Key, "%s in %s", c.key, c.url)
		_, ok = m.partition("other", c.key)
		require.False(t, ok, "another bucket")
	}
	_, err := newMatcher(files.Spec{URL: "file:///data/dt={partition}/"}, schemas.PartitionDate)
	require.ErrorContains(t, err, "s3://")
}

func TestNotificationsNameOnlyPartitions(t *testing.T) {
	t.Parallel()
	m, err := newMatcher(files.Spec{URL: "s3://lake/orders/dt={partition}/", Format: files.CSV}, schemas.PartitionDate)
	require.NoError(t, err)
	body := `{"Records":[
		{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"lake"},"object":{"key":"orders/dt=2026-11-28/a.csv"}}},
		{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"lake"},"object":{"key":"orders/dt=2026-11-28/b.csv"}}},
		{"eventName":"s3:ObjectRemoved:Delete","s3":{"bucket":{"name":"lake"},"object":{"key":"orders/dt%3D2026-11-27/a+b.csv"}}},
		{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"other"},"object":{"key":"orders/dt=2026-11-26/a.csv"}}},
		{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"lake"},"object":{"key":"orders/x.csv"}}}]}`
	var keys []string
	for _, p := range m.partitionsOf([]byte(body)) {
		keys = append(keys, p.Key)
	}
	require.Equal(t, []string{"2026-11-28", "2026-11-27"}, keys, "each once, the URL-encoded one too")
	require.Empty(t, m.partitionsOf([]byte("not json")))
	require.Empty(t, m.partitionsOf([]byte(`{"Records":[{"s3":{"bucket":{"name":"lake"},"object":{"key":"orders/dt=2026-11-28/a.csv"}}}],"pad":"`+string(make([]byte, maxNotificationBytes))+`"}`)),
		"too large to read")
}

func TestRunIDNamesTheListingAndTheLoadItReplaces(t *testing.T) {
	t.Parallel()
	fp := "0123456789abcdef0123456789abcdef"
	require.Equal(t, "watch-0123456789abcdef", RunID(fp, 0))
	require.Equal(t, "watch-0123456789abcdef-42", RunID(fp, 42))
}
