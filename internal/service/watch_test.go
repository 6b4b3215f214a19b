package service

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
)

// A dataset's watch is built from its config as its loads' files are; a
// reload restarts it only when what it is built from changed.
func TestWatchDatasetFollowsTheConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	parse := func(watch string) *config.Config {
		c, err := config.Parse([]byte(`pipeline: shop
datasets:
  landing:
    strategy: delete_insert
    target: analytics.landing
    partition_column: event_date
    partition_type: timestamp
    expect: {every: hour, from: "2026-01-01T00:00:00Z"}
    source:
      files: {url: "file://`+dir+`/landing/dt={partition}/", format: csv, ready: {marker: _SUCCESS}}
`+watch+`
  orders:
    strategy: delete_insert
    target: analytics.orders
    partition_column: event_date
    source: SELECT * FROM staging.orders WHERE event_date = @partition
`), func(string) string { return "" })
		require.NoError(t, err)
		require.NoError(t, c.Validate())
		return c
	}
	c := parse("    watch: {every: 10s, last: 2}")
	defs := watchDefinitions(c)
	require.Len(t, defs, 1, "orders has no watch")
	ds, err := watchDataset(c, "landing")
	require.NoError(t, err)
	require.Equal(t, "landing", ds.Name)
	require.Equal(t, schemas.PartitionHour, ds.Type)
	require.Equal(t, 10*time.Second, ds.Every)
	require.Equal(t, 2, ds.Last)
	require.Empty(t, ds.Subject)
	require.Equal(t, 3, ds.Retries, "watch.retries' default")
	require.Equal(t, 5*time.Minute, ds.RetryAfter)
	require.Equal(t, 4, ds.Attempts, "the dataset's retries, and its first load")
	require.NotNil(t, ds.Calendar)
	require.Equal(t, "2026-01-01T00:00:00Z", ds.Calendar.From)
	require.Equal(t, "_SUCCESS", ds.Spec.Ready.Marker)
	require.NotNil(t, ds.Store)

	require.Equal(t, defs, watchDefinitions(parse("    watch: {every: 10s, last: 2}")))
	require.NotEqual(t, defs["landing"], watchDefinitions(parse("    watch: {every: 20s, last: 2}"))["landing"])
	require.NotEqual(t, defs["landing"], watchDefinitions(parse("    watch: {every: 10s, last: 2, retries: 0}"))["landing"])
	ds, err = watchDataset(parse("    watch: {retries: 0, retry_after: 1h}\n    retries: 9"), "landing")
	require.NoError(t, err)
	require.Equal(t, 0, ds.Retries, "retries: 0 turns them off")
	require.Equal(t, time.Hour, ds.RetryAfter)
	require.Equal(t, 10, ds.Attempts)
	require.Empty(t, watchDefinitions(parse("")))
}
