package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/s3test"
)

// TestWatchReloadsAChangedPartitionOnce: two replicas watch two file
// datasets in S3. landing is listed every 5 s: its partition loads once
// complete, then once more when a file is added (whichever replica sees it
// first, JetStream keeps one event), and its then: cascades under the
// same run. pushed is listed every hour, and only its newest partition:
// an older partition of it loads within seconds of the store's
// notifications, which nothing else explains.
func TestWatchReloadsAChangedPartitionOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	s3 := s3test.Start(t, s3test.NATSEvents(w.ns.URL(), "s3.events"))
	s3.CreateBucket(t, "lake")
	w.db.Exec(t, `CREATE TABLE analytics.landing (LIKE analytics.t); CREATE TABLE analytics.pushed (LIKE analytics.t)`)
	yesterday := time.Now().UTC().AddDate(0, 0, -1).Format("2006-01-02")
	w.db.Exec(t, `INSERT INTO staging.src SELECT i, $1::date, i, 'then' FROM generate_series(1, 3) i`, yesterday)
	cfg, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	cfg = fmt.Appendf(cfg, `  landing:
    strategy: delete_insert
    target: analytics.landing
    partition_column: event_date
    source:
      files: {url: "s3://lake/landing/dt={partition}/", format: csv, ready: {marker: _SUCCESS}}
    then: [orders]
    watch: {every: 5s}
  pushed:
    strategy: delete_insert
    target: analytics.pushed
    partition_column: event_date
    source:
      files: {url: "s3://lake/pushed/dt={partition}/", format: csv, ready: {marker: _SUCCESS}}
    watch: {every: 1h, last: 1, notifications: {subject: s3.events}}
s3:
  endpoint: %s
  path_style: true
`, s3.Endpoint)
	require.NoError(t, os.WriteFile(w.cfg, cfg, 0o600))
	env := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}

	landing := "landing/dt=" + yesterday + "/"
	s3.Put(t, "lake", landing+"part-1.csv", []byte("id,amount,note\n1,1.50,a\n"))
	s3.Put(t, "lake", landing+"_SUCCESS", nil)
	w.streams()
	a, b := w.serve(env...), w.serve(env...)

	loads := func(dataset string) string {
		return "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = '" + dataset + "' AND status = 'success'"
	}
	w.waitCount(1, loads("landing"))
	w.waitCount(1, loads("orders")+" AND run_id LIKE 'watch-%'")
	s3.Put(t, "lake", landing+"part-2.csv", []byte("id,amount,note\n2,2.50,b\n"))
	w.waitCount(2, loads("landing"))
	w.waitCount(2, loads("orders")+" AND run_id LIKE 'watch-%'")

	pushed := "pushed/dt=2026-11-05/"
	start := time.Now()
	s3.Put(t, "lake", pushed+"part-1.csv", []byte("id,amount,note\n1,1.50,a\n"))
	s3.Put(t, "lake", pushed+"_SUCCESS", nil)
	w.waitCount(1, loads("pushed"))
	s3.Put(t, "lake", pushed+"part-2.csv", []byte("id,amount,note\n2,2.50,b\n"))
	w.waitCount(2, loads("pushed"))
	t.Logf("pushed: loaded twice from its notifications in %s", time.Since(start).Round(time.Millisecond))

	// One more pass of each replica over landing finds it loaded.
	time.Sleep(6 * time.Second)
	w.waitSettled()
	for _, ds := range []string{"landing", "pushed"} {
		require.EqualValues(t, 2, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = $1", ds),
			"%s: two loads, no duplicate event even skipped", ds)
		require.EqualValues(t, 2, w.count("SELECT count(*) FROM analytics."+ds), "%s: the partition rebuilt, never doubled", ds)
		require.EqualValues(t, 2, w.count("SELECT count(DISTINCT run_id) FROM idem.pipeline_audit WHERE task_id = $1 AND run_id LIKE 'watch-%'", ds))
	}
	info, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(t, err)
	si, err := info.Info(context.Background(), jetstream.WithSubjectFilter("idem.ready.landing"))
	require.NoError(t, err)
	require.EqualValues(t, 2, si.State.Subjects["idem.ready.landing"], "two replicas, one event per change")
	require.EqualValues(t, 3, w.count("SELECT count(*) FROM analytics.t WHERE event_date = $1", yesterday), "then: cascaded")
	require.Empty(t, w.deadLetters())
	for _, p := range []*proc{a, b} {
		require.Contains(t, p.output(), "watch: listing the newest partitions")
		require.NotContains(t, p.output(), s3.SecretKey)
	}
	require.True(t, strings.Contains(a.output()+b.output(), `"reason":"changed"`), "a replica said why it published")
}
