package service

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// syncBuffer is a log sink the service's goroutines may write to while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRun starts the service as `idem serve` does, from a config alone (Run
// opens both connections), loads one partition and stops it.
func TestRun(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	ns := natstest.RunServer(t)
	db := pgtest.NewDB(t)
	runOnePartition(t, ns, db, "")
}

// TestReverifyOffNeitherHoldsNorPasses: with postgres.reverify false, a
// warehouse that is not the one last verified (a promoted standby carries
// the old timeline) holds no load and gets no pass: the stored identity is
// left as it was.
func TestReverifyOffNeitherHoldsNorPasses(t *testing.T) {
	ns := natstest.RunServer(t)
	db := audittest.NewDB(t)
	ctx := context.Background()
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	cur, err := audit.CurrentIdentity(ctx, db.Pool)
	require.NoError(t, err)
	old := audit.Identity{SystemIdentifier: cur.SystemIdentifier, Timeline: cur.Timeline + 100}
	require.NoError(t, audit.StoreIdentity(ctx, db.Pool, "shop", old))
	logs := runOnePartition(t, ns, db, "  reverify: false\n")
	stored, ok, err := audit.StoredIdentity(ctx, db.Pool, "shop")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, old, stored, "no pass ran")
	require.NotContains(t, logs, "re-verif")
}

// runOnePartition runs the service on one delete_insert dataset (more
// postgres: lines in extra), loads a partition, checks the HTTP endpoints
// and stops it; it returns the service's log.
func runOnePartition(t *testing.T, ns *server.Server, db *pgtest.DB, extra string) string {
	t.Helper()
	db.Exec(t, `CREATE SCHEMA staging; CREATE SCHEMA analytics;
		CREATE TABLE staging.src (id bigint, event_date date);
		CREATE TABLE analytics.t (id bigint, event_date date NOT NULL);
		INSERT INTO staging.src SELECT i, date '2026-01-05' FROM generate_series(1, 10) i;`)
	cfg, err := config.Parse([]byte(sprintf(`pipeline: shop
nats:
  url: %s
  ack_wait: 5s
postgres:
  url: %s
%shttp:
  addr: 127.0.0.1:0
datasets:
  orders:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: SELECT id, event_date FROM staging.src WHERE event_date = @partition
`, ns.ClientURL(), db.URL, extra)), nil)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())

	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, Log: zerolog.New(logs), BuildVersion: "test", Grace: 5 * time.Second,
			ClientName: "idem test", Ready: func(addr string) { ready <- addr }})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v\n%s", err, logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("Run did not start\n%s", logs)
	}
	require.Contains(t, logs.String(), "idem serve started")

	js := natstest.JetStream(t, ns)
	_, err = js.Publish(ctx, "idem.ready.orders", []byte(`{"dataset":"orders","partition":"2026-01-05","run_id":"r1"}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'r1' AND status = $1", audit.StatusSuccess) == 1
	}, 30*time.Second, 20*time.Millisecond, logs.String())
	require.EqualValues(t, 10, db.Int(t, "SELECT count(*) FROM analytics.t"))

	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready\nconfig " + ConfigVersion(cfg), "/metrics": "idem_config_info"} {
		res, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.True(t, strings.Contains(string(body), want), "%s: %s", path, body)
	}

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop")
	}
	require.Contains(t, logs.String(), "idem serve stopped cleanly")
	return logs.String()
}
