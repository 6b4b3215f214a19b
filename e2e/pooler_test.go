package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/testkit/browsertest"
	"github.com/idem-data/idem/testkit/pgtest"
)

// behindPgBouncer is a world whose idem commands reach PostgreSQL through a
// real pgbouncer (Debian's, default settings but pool_mode); the test's own
// checks read the database directly.
func behindPgBouncer(t *testing.T, mode string, o opts) (*world, *pgtest.PgBouncer) {
	t.Helper()
	var bouncer *pgtest.PgBouncer
	o.serveURL = func(dbURL string) string {
		cfg, err := pgconn.ParseConfig(dbURL)
		require.NoError(t, err)
		bouncer = pgtest.StartPgBouncer(t, dbURL, mode)
		return bouncer.URL(cfg.Database)
	}
	return newWorld(t, o), bouncer
}

// poolerYAML adds an append_dedupe dataset (its view is built and compared
// through the pooler) to the world's orders.
const poolerYAML = `  events:
    strategy: append_dedupe
    target: raw.events
    key: [event_id]
    view: raw.latest_events
    source: SELECT event_id, event_date, note FROM staging.events WHERE event_date = @partition
`

const poolerSQL = `
CREATE SCHEMA raw;
CREATE TABLE staging.events (event_id bigint, event_date date, note text);
CREATE TABLE raw.events (event_id bigint, event_date date, note text, run_id text, load_seq bigint);
INSERT INTO staging.events SELECT d * 100 + i, date '2026-11-01' + d, 'e' || i FROM generate_series(0, 4) d, generate_series(1, 5) i;
`

// protocolTrouble is what a pooled server connection shared wrongly says:
// a startup parameter refused, named statements of another client, a
// protocol error.
var protocolTrouble = []string{"08P01", "42P05", "26000", "prepared statement", "unsupported startup parameter", "protocol violation"}

// TestBehindPgBouncer runs the whole path through Debian's pgbouncer, its
// settings left at their defaults apart from pool_mode, in transaction and
// in session mode: migrate and validate, two replicas, every event twice,
// forced reruns, a replica's SIGTERM mid-backlog, a check, append_dedupe's
// view, publish --wait and the JSON API. Every event loads exactly once
// (forced ones once more), nothing is dead-lettered, no protocol error is
// logged, and no pooled server connection is left holding an advisory lock,
// a session setting, a prepared statement or a temporary object.
func TestBehindPgBouncer(t *testing.T) {
	for _, mode := range []string{pgtest.PoolTransaction, pgtest.PoolSession} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			w, bouncer := behindPgBouncer(t, mode, opts{inFlight: 4, extraYAML: poolerYAML,
				orderFields: "    checks:\n      - row_count: {min: 1}\n"})
			w.db.Exec(t, poolerSQL)
			ctx := context.Background()

			code, out := runIdem(t, nil, "migrate", "--config", w.cfg)
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "schema idem is up to date")
			code, out = runIdem(t, nil, "validate", "--config", w.cfg)
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "postgres: a "+mode+" pooler")

			a, b := w.serve(), w.serve()
			for _, p := range []*proc{a, b} {
				require.Contains(t, p.output(), `"pooler":"`+mode+`"`, "the route is said once at start")
				require.Contains(t, p.output(), `"statement_mode":"describe"`)
			}
			var parts []string
			for d := 1; d <= 20; d++ {
				p := fmt.Sprintf("2026-11-%02d", d)
				parts = append(parts, p)
				w.publish(p, "r1", nil)
				w.publish(p, "r1", nil) // every event twice
				if d == 10 {
					a.signal(syscall.SIGTERM) // mid-backlog
				}
			}
			require.Equal(t, 0, a.exit(t, 60*time.Second), a.output())
			w.waitCount(20, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders' AND status = 'success'")
			w.waitSettled()
			for d := 1; d <= 5; d++ { // forced reruns of runs that already loaded
				w.publishBody("orders", fmt.Sprintf(`{"dataset":"orders","partition":"2026-11-%02d","run_id":"r1","force":true}`, d))
			}
			w.publishBody("events", `{"dataset":"events","partition":"2026-11-02","run_id":"e1"}`)
			w.publishBody("events", `{"dataset":"events","partition":"2026-11-02","run_id":"e1"}`)

			w.waitCount(25, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders' AND status = 'success'")
			w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'events' AND status = 'success'")
			w.waitSettled()
			require.EqualValues(t, 20, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders' AND status = 'skipped'"),
				"each duplicate skipped once")
			require.Equal(t, w.expected(parts...), w.target())
			require.EqualValues(t, 5, w.count("SELECT count(*) FROM raw.latest_events"))
			require.EqualValues(t, 25, w.count("SELECT count(*) FROM idem.check_results WHERE task_id = 'orders' AND status = 'pass'"),
				"the check ran with every load")
			require.Empty(t, w.deadLetters())

			// publish --wait and the JSON API, through the same pooler.
			res := publishWait(t, w, "orders", "2026-11-21", "--run-id", "w1", "--wait", "--timeout", "60s")
			require.Equal(t, 0, res.code, res.stderr)
			require.Equal(t, "loaded", res.last["status"])
			resp, err := http.Get("http://" + b.httpAddr() + "/api/v1/partitions/orders/2026-11-21")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			require.Contains(t, string(body), `"w1"`)

			// The status page says what idem found, in a real browser.
			bctx := browsertest.New(t)
			require.NoError(t, chromedp.Do(bctx, chromedp.Navigate("http://"+b.httpAddr()+"/"), chromedp.WaitVisible("#grid")))
			require.Contains(t, browsertest.Eval[string](t, bctx, `document.querySelector('#h-postgres').textContent`),
				"a "+mode+" pooler")

			// A backfill through the pooler, and a dead letter replayed once
			// its cause is fixed.
			code, stdout, stderr := rbExec(t, w, []string{"backfill", "orders", "--from", "2026-11-22", "--to", "2026-11-24", "--wait", "--timeout", "60s"})
			require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
			w.waitCount(3, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders' AND status = 'success' AND partition_key >= '2026-11-22'")
			w.db.Exec(t, "ALTER TABLE raw.events RENAME TO events_away")
			w.publishBody("events", `{"dataset":"events","partition":"2026-11-03","run_id":"e2"}`)
			dl := w.waitDeadLetters(1)
			w.db.Exec(t, "ALTER TABLE raw.events_away RENAME TO events")
			code, stdout, stderr = rbExec(t, w, []string{"dlq", "replay", fmt.Sprint(dl[0].Sequence)})
			require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
			w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'events' AND run_id = 'e2' AND status = 'success'")
			w.waitSettled()

			// With b idle and running: nothing on any pooled server
			// connection, nothing held by an idle backend.
			requireNoLeftovers(ctx, t, w, bouncer)
			b.signal(syscall.SIGTERM)
			require.Equal(t, 0, b.exit(t, 60*time.Second), b.output())
			requireNoLeftovers(ctx, t, w, bouncer)

			for _, p := range []*proc{a, b} {
				for _, bad := range protocolTrouble {
					require.NotContains(t, p.output(), bad)
				}
			}
			require.NotContains(t, bouncer.Log(), "unsupported startup parameter")
		})
	}
}

func requireNoLeftovers(ctx context.Context, t *testing.T, w *world, bouncer *pgtest.PgBouncer) {
	t.Helper()
	// In session mode each of a replica's idle pooled connections keeps a
	// server connection: idem's pool may hold max_in_flight + 6 (10 here)
	// of PgBouncer's 20, so the check takes the other 10, never waiting.
	left, err := pgtest.SessionLeftovers(ctx, bouncer.URL(w.db.Name), 10)
	require.NoError(t, err)
	require.Empty(t, left, "a pooled server connection keeps what an earlier client left")
	locks, err := pgtest.IdleAdvisoryLocks(ctx, pgtest.AdminURL(), w.db.Name)
	require.NoError(t, err)
	require.Empty(t, locks)
}

// publishBody publishes a raw event body on dataset's subject.
func (w *world) publishBody(dataset, body string) {
	w.t.Helper()
	_, err := w.js.PublishMsg(context.Background(), &nats.Msg{Subject: "idem.ready." + dataset, Data: []byte(body)})
	require.NoError(w.t, err)
}

// TestStatementPoolingIsRefused: a statement pooler cannot run idem's
// transactions; migrate, validate and serve say so in one line and exit 1.
func TestStatementPoolingIsRefused(t *testing.T) {
	t.Parallel()
	w, _ := behindPgBouncer(t, pgtest.PoolStatement, opts{})
	for _, args := range [][]string{{"migrate"}, {"validate"}, {"serve"}} {
		code, out := runIdem(t, nil, append(args, "--config", w.cfg)...)
		require.Equal(t, 1, code, "%v: %s", args, out)
		require.Contains(t, out, "runs statement pooling", args)
		require.Contains(t, out, "set pool_mode = transaction", args)
	}
}

// TestRefusedLoginsEndAtOnce: a login PostgreSQL, or the pooler in front
// of it, answers and refuses ends migrate, validate and a first serve with
// exit 1 and the cause, without the wait meant for a server that is down.
func TestRefusedLoginsEndAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := localpg.Start(ctx, localpg.Options{HBA: []string{"host all idem_pw,idem_nologin,idem_noconnect 127.0.0.1/32 scram-sha-256"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	w := newWorld(t, opts{pgAdmin: srv.URL("postgres")})
	w.db.Exec(t, `CREATE ROLE idem_pw LOGIN PASSWORD 'right-pw-1'; CREATE ROLE idem_nologin NOLOGIN PASSWORD 'right-pw-2';
	              CREATE ROLE idem_noconnect LOGIN PASSWORD 'right-pw-3';
	              REVOKE CONNECT ON DATABASE `+w.db.Name+` FROM PUBLIC`)
	at := func(user, pw, db string) string {
		return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", user, pw, srv.Port, db)
	}
	bouncer := pgtest.StartPgBouncer(t, w.db.URL, pgtest.PoolTransaction)
	for _, c := range []struct{ name, url, want string }{
		{"wrong password", at("idem_pw", "wrong", w.db.Name), "refused the login of idem_pw: password authentication failed"},
		{"role without LOGIN", at("idem_nologin", "right-pw-2", w.db.Name), `refused the login of idem_nologin: role "idem_nologin" is not permitted to log in`},
		{"no such database", at("idem_pw", "right-pw-1", "no_such_db"), `has no database "no_such_db"`},
		{"no CONNECT", at("idem_noconnect", "right-pw-3", w.db.Name), "GRANT CONNECT ON DATABASE " + w.db.Name + " TO idem_noconnect"},
		{"a startup parameter the pooler refuses", bouncer.URL(w.db.Name) + "&search_path=analytics", "refused startup parameter search_path"},
	} {
		for _, args := range [][]string{{"migrate"}, {"validate"}, {"serve"}} {
			start := time.Now()
			code, out := runIdem(t, []string{"IDEM_DATABASE_URL=" + c.url}, append(args, "--config", w.cfg)...)
			require.Equal(t, 1, code, "%s, %v: %s", c.name, args, out)
			require.Contains(t, out, c.want, "%s, %v", c.name, args)
			require.NotContains(t, out, "cannot reach PostgreSQL", "%s, %v: the server answered", c.name, args)
			require.NotContains(t, out, "waiting for the server to start", "%s, %v", c.name, args)
			require.Less(t, time.Since(start), 30*time.Second, "%s, %v: not retried", c.name, args)
		}
	}
	// The pooler's URL works once the parameter is gone.
	code, out := runIdem(t, []string{"IDEM_DATABASE_URL=" + bouncer.URL(w.db.Name)}, "migrate", "--config", w.cfg)
	require.Equal(t, 0, code, out)
	require.True(t, strings.Contains(out, "up to date"), out)
}

// TestPgBouncerRestartUnderLoad restarts the pooler while two replicas
// drain a backlog of slowed loads through it in transaction mode: every
// client connection drops at once, mid-load. Loads in flight fail and are
// retried; nothing is dead-lettered, and every event loads exactly once.
func TestPgBouncerRestartUnderLoad(t *testing.T) {
	t.Parallel()
	w, bouncer := behindPgBouncer(t, pgtest.PoolTransaction, opts{inFlight: 2, retries: 5})
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (150)")
	a, b := w.serve(), w.serve()
	var parts []string
	for d := 1; d <= 30; d++ {
		p := fmt.Sprintf("2026-11-%02d", d)
		parts = append(parts, p)
		w.publish(p, "r1", nil)
	}
	ctx := context.Background()
	for range 2 {
		w.waitSleeping() // a load is mid-statement
		require.NoError(t, bouncer.Restart(ctx))
	}
	w.waitCount(30, "SELECT count(*) FROM idem.run_ledger")
	w.waitSettled()
	require.EqualValues(t, 30, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"), "each event loaded once")
	require.Equal(t, w.expected(parts...), w.target())
	require.Empty(t, w.deadLetters())
	require.True(t, a.alive() && b.alive(), "both replicas rode the restarts out")
	t.Logf("attempts that did not succeed with the restarts: %d; loads that logged a failure: %d",
		w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status <> 'success'"),
		strings.Count(a.output()+b.output(), `"load failed"`))
	requireNoLeftovers(ctx, t, w, bouncer)
}

// TestServeWaitsForAServerBehindThePooler: with PostgreSQL down behind a
// running pooler, the pooler takes the login and then says its server is
// failing (08P01, server_login_retry) or holds the query; a first serve
// waits for the server, as it does without a pooler, and starts once it is
// back.
func TestServeWaitsForAServerBehindThePooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := localpg.Start(ctx, localpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	w, _ := behindPgBouncer(t, pgtest.PoolTransaction, opts{pgAdmin: srv.URL("postgres")})
	require.NoError(t, srv.Stop(ctx, "fast"))
	p := w.startServe("10s")
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "waiting for the server to start") }, 60*time.Second, 50*time.Millisecond,
		"serve did not wait:\n%s", p.output())
	require.True(t, p.alive(), "serve exited while the server was down:\n%s", p.output())
	require.NoError(t, srv.Restart(ctx, ""))
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "idem serve started") }, 90*time.Second, 50*time.Millisecond,
		"serve did not start once the server was back:\n%s", p.output())
	w.publish("2026-11-02", "r1", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
}
