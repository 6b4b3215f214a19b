package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/service"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
	"github.com/idem-data/idem/testkit/pgtest"
)

// cliWorld is a real NATS server (in this process), a real database with the
// idem schema and demo-like tables, and a config file pointing at both: the
// operator commands run against it exactly as on a real deployment.
type cliWorld struct {
	t    *testing.T
	ns   *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	db   *pgtest.DB
	cfg  string
	env  map[string]string
	stop func()
}

// worldTablesSQL: staging.src holds 10 rows for each day of 2026; the orders
// dataset loads them into analytics.t.
const worldTablesSQL = `
CREATE SCHEMA staging; CREATE SCHEMA analytics;
CREATE TABLE staging.src (id bigint, event_date date, amount numeric(12,2), note text);
CREATE TABLE analytics.t (id bigint, event_date date NOT NULL, amount numeric(12,2), note text);
CREATE INDEX ON analytics.t (event_date);
INSERT INTO staging.src
SELECT d * 100 + i, date '2026-01-01' + d, i * 1.5, 'row ' || i
  FROM generate_series(0, 364) d, generate_series(1, 10) i;
`

func newCLIWorld(t *testing.T) *cliWorld {
	t.Helper()
	dir := t.TempDir()
	ns := natstest.RunServer(t)
	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	db := audittest.NewDB(t)
	_, err = audit.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	db.Exec(t, worldTablesSQL)
	cfg := fmt.Sprintf(`pipeline: shop
nats:
  url: %s
  ack_wait: 5s
  max_in_flight: 8
postgres:
  url: %s
http:
  addr: 127.0.0.1:0
datasets:
  orders:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition
    retries: 1
    retry_delay: 200ms
`, ns.ClientURL(), db.URL)
	path := filepath.Join(dir, "idem.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	w := &cliWorld{t: t, ns: ns, nc: nc, js: js, db: db, cfg: path, env: map[string]string{}, stop: func() {}}
	require.NoError(t, w.run("streams").e)
	return w
}

// run runs an idem command with --config pointing at the world.
func (w *cliWorld) run(args ...string) result {
	w.t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append(args, "--config", w.cfg), &out, &errOut, func(k string) string { return w.env[k] })
	return result{out.String(), errOut.String(), err}
}

// serve runs `idem serve` in this process until the test ends (or stopServe).
func (w *cliWorld) serve() {
	w.t.Helper()
	e := &env{out: &bytes.Buffer{}, errOut: &bytes.Buffer{}, getenv: func(string) string { return "" }, configPath: w.cfg}
	cfg, err := e.validConfig()
	require.NoError(w.t, err)
	pool, err := connect(context.Background(), cfg.Postgres.URL)
	require.NoError(w.t, err)
	nc, err := nats.Connect(cfg.NATS.URL)
	require.NoError(w.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- service.Run(ctx, service.Options{Config: cfg, Log: zerolog.Nop(), Grace: 5 * time.Second,
			Pool: pool, NATS: nc, Ready: func(string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		w.t.Fatalf("serve: %v", err)
	}
	stopped := false
	w.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		require.NoError(w.t, <-done)
		nc.Close()
		pool.Close()
	}
	w.t.Cleanup(w.stop)
}

func (w *cliWorld) count(sql string, args ...any) int64 { return w.db.Int(w.t, sql, args...) }

func (w *cliWorld) waitCount(want int64, sql string, args ...any) {
	w.t.Helper()
	var got int64
	require.Eventually(w.t, func() bool {
		got = w.count(sql, args...)
		return got == want
	}, 60*time.Second, 20*time.Millisecond, "want %d from %s (last %d)", want, sql, got)
}

// streamMsgs counts the messages a stream holds.
func (w *cliWorld) streamMsgs(stream string) uint64 {
	w.t.Helper()
	s, err := w.js.Stream(context.Background(), stream)
	require.NoError(w.t, err)
	info, err := s.Info(context.Background())
	require.NoError(w.t, err)
	return info.State.Msgs
}
