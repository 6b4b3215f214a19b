package cli

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/embeddednats"
	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/internal/natsconn"
	"github.com/idem-data/idem/internal/service"
)

//go:embed devdata/idem.dev.yaml
var devConfig []byte

//go:embed devdata/schema.sql
var devSchema string

func devCmd(e *env) *cobra.Command {
	var once bool
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run idem on an embedded default: in-process NATS, a throwaway PostgreSQL, demo datasets",
		Long: `Start an in-process NATS server with JetStream and a throwaway PostgreSQL from
the local binaries (or use IDEM_DATABASE_URL), create the demo tables, and run
'idem serve' on them. A short scenario plays first: a load per strategy, a
duplicate delivery, a replay with a new run_id and two poison messages; the
audit rows and the dead letters are printed. Then it keeps serving, and prints
the 'nats pub' line to try, until Ctrl-C. Everything is removed on exit.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return e.dev(cmd.Context(), once) },
	}
	c.Flags().BoolVar(&once, "once", false, "play the scenario and exit instead of serving until Ctrl-C")
	return c
}

func (e *env) dev(ctx context.Context, once bool) error {
	cleanup := []func(){}
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	tmp, err := os.MkdirTemp("", "idem-dev-")
	if err != nil {
		return err
	}
	cleanup = append(cleanup, func() { _ = os.RemoveAll(tmp) })
	// Closed last: NATS callbacks may still log while the rest shuts down.
	logFile, err := os.Create(tmp + "/idem.log")
	if err != nil {
		return err
	}
	cleanup = append(cleanup, func() { logFile.Close() })

	port := 4222 // the nats CLI's default, when free
	if l, err := net.Listen("tcp", "127.0.0.1:4222"); err == nil {
		l.Close()
	} else {
		port = 0
	}
	ns, err := embeddednats.Start(embeddednats.Options{Port: port, StoreDir: tmp})
	if err != nil {
		return err
	}
	cleanup = append(cleanup, ns.Stop)
	fmt.Fprintf(e.out, "NATS with JetStream on %s (in-process)\n", ns.URL())

	url := e.getenv("IDEM_DATABASE_URL")
	if url == "" {
		srv, err := localpg.Start(ctx, localpg.Options{})
		if err != nil {
			return err
		}
		cleanup = append(cleanup, func() { _ = srv.Close() })
		url = srv.URL("postgres")
		fmt.Fprintf(e.out, "PostgreSQL on 127.0.0.1:%d (throwaway)\n", srv.Port)
	}
	pool, err := connect(ctx, url)
	if err != nil {
		return err
	}
	cleanup = append(cleanup, pool.Close)
	if _, err := audit.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, devSchema); err != nil {
		return fmt.Errorf("demo tables: %w", err)
	}

	cfg, err := config.Parse(devConfig, nil)
	if err != nil {
		return err
	}
	cfg.NATS.URL = ns.URL()
	cfg.NATS.AckWait = config.Duration(5 * time.Second)
	cfg.HTTP.Addr = "127.0.0.1:0"
	for _, d := range cfg.Datasets {
		d.RetryDelay = config.Duration(time.Second)
	}
	landing := filepath.Join(tmp, "landing", "orders")
	cfg.Datasets["landed_orders"].Source.Files.URL = "file://" + landing + "/dt={partition}/"
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo config: %w", err)
	}

	log := zerolog.New(logFile).With().Timestamp().Logger()
	nc, err := natsconn.Connect(ctx, cfg.NATS, "idem dev", log)
	if err != nil {
		return err
	}
	cleanup = append(cleanup, nc.Close)

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- service.Run(sctx, service.Options{Config: cfg, Log: log, BuildVersion: Version, Grace: 5 * time.Second,
			Pool: pool, NATS: nc, Ready: func(addr string) { ready <- addr }})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		stop()
		return fmt.Errorf("idem serve: %w", err)
	}
	fmt.Fprintf(e.out, "idem serve running: status page on http://%s/ , metrics on http://%s/metrics, log in %s\n", addr, addr, logFile.Name())

	if err := e.devScenario(ctx, nc, pool, cfg, landing); err != nil {
		stop()
		<-done
		return err
	}
	if !once {
		fmt.Fprintf(e.out, "\nStill serving. Try, from another terminal:\n\n"+
			"  nats --server %s pub idem.ready.orders '{\"dataset\":\"orders\",\"partition\":\"2026-11-27\",\"run_id\":\"manual__1\"}'\n\n"+
			"then see the audit row with psql %q -c 'TABLE idem.partition_status'\nor the grid on http://%s/\nCtrl-C to stop.\n", ns.URL(), url, addr)
		select {
		case <-ctx.Done():
		case err := <-done:
			return err
		}
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	fmt.Fprintln(e.out, "stopped cleanly")
	return nil
}

// devScenario publishes the demo events through JetStream exactly as a
// scheduler would, and waits for each one's fate in the audit table or the
// dead-letter stream.
func (e *env) devScenario(ctx context.Context, nc *nats.Conn, pool *pgxpool.Pool, cfg *config.Config, landing string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	dlq, err := js.Stream(ctx, cfg.NATS.DLQStream)
	if err != nil {
		return err
	}
	type step struct {
		title, subject, body string
		want                 string // audit status of (dataset, run_id), or "dlq"
	}
	steps := []step{
		{"load orders for 2026-11-28", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-28","run_id":"scheduled__2026-11-28"}`, audit.StatusSuccess},
		{"orders' success triggered daily_revenue through the outbox (same partition and run_id)", "", `{"dataset":"daily_revenue","partition":"2026-11-28","run_id":"scheduled__2026-11-28"}`, audit.StatusSuccess},
		{"the same event delivered again: no work, recorded as skipped", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-28","run_id":"scheduled__2026-11-28"}`, audit.StatusSkipped},
		{"a manual replay with a new run_id: the partition is replaced, not doubled", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-28","run_id":"manual__replay"}`, audit.StatusSuccess},
		{"and daily_revenue ran once more, for the replay's run_id", "", `{"dataset":"daily_revenue","partition":"2026-11-28","run_id":"manual__replay"}`, audit.StatusSuccess},
		{"merge customers updated on 2026-11-28", "idem.ready.customers", `{"dataset":"customers","partition":"2026-11-28","run_id":"scheduled__2026-11-28"}`, audit.StatusSuccess},
		{"merge them again under a new run_id: unchanged rows are not rewritten", "idem.ready.customers", `{"dataset":"customers","partition":"2026-11-28","run_id":"manual__again"}`, audit.StatusSuccess},
		{"append events of 2026-11-27", "idem.ready.events", `{"dataset":"events","partition":"2026-11-27","run_id":"r2"}`, audit.StatusSuccess},
		{"append again under an older-looking run_id: the view still shows one row per event", "idem.ready.events", `{"dataset":"events","partition":"2026-11-27","run_id":"r1"}`, audit.StatusSuccess},
		{"catch up an earlier day of orders (daily_revenue follows)", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-25","run_id":"scheduled__2026-11-25"}`, audit.StatusSuccess},
		{"and another", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-26","run_id":"scheduled__2026-11-26"}`, audit.StatusSuccess},
		{"poison: 2026-02-30 is not a date", "idem.ready.orders", `{"dataset":"orders","partition":"2026-02-30","run_id":"bad"}`, "dlq"},
		{"poison: not even JSON", "idem.ready.orders", `{"dataset": "orders", oops`, "dlq"},
		{"a partition with no source rows is refused, never a silent wipe", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-24","run_id":"scheduled__2026-11-24"}`, "dlq"},
		{"an upstream retry doubled staging.orders of 2026-11-22: its unique check refuses the load before it commits", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-22","run_id":"scheduled__2026-11-22"}`, "dlq"},
	}
	dead := 0
	for _, s := range steps {
		if s.subject == "" { // an event idem publishes itself: only wait for it
			fmt.Fprintf(e.out, "\n> %s\n", s.title)
		} else {
			fmt.Fprintf(e.out, "\n> %s\n  publish %s %s\n", s.title, s.subject, s.body)
			// A plain publish, as `nats pub` does; JetStream stores it on the events stream.
			if _, err := js.Publish(ctx, s.subject, []byte(s.body)); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var got string
		if s.want == "dlq" {
			dead++
			got, err = waitDeadLetter(wctx, dlq, dead)
		} else {
			got, err = waitAudit(wctx, pool, s.body, s.want)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", s.title, err)
		}
		fmt.Fprintf(e.out, "  %s\n", got)
	}
	if err := e.devFiles(ctx, js, pool, landing); err != nil {
		return err
	}
	var n int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM analytics.fact_orders").Scan(&n); err == nil {
		fmt.Fprintf(e.out, "\nanalytics.fact_orders holds %d rows (25 for each of the 3 days loaded, never doubled)\n", n)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM raw.latest_events").Scan(&n); err == nil {
		fmt.Fprintf(e.out, "raw.latest_events shows %d events (raw.events keeps every appended copy)\n", n)
	}
	fmt.Fprintln(e.out, "\nidem.pipeline_audit:")
	return printAudit(ctx, e.out, pool)
}

// waitAudit waits for the newest audit row of the event's run to reach want.
func waitAudit(ctx context.Context, pool *pgxpool.Pool, body, want string) (string, error) {
	runID := between(body, `"run_id":"`, `"`)
	dataset := between(body, `"dataset":"`, `"`)
	for {
		var status, rows string
		err := pool.QueryRow(ctx, `SELECT status, coalesce(rows_inserted::text || ' inserted, ' || rows_updated::text || ' updated, ' ||
		         coalesce(rows_deleted::text, 'all (truncate)') || ' deleted', '')
		    FROM idem.pipeline_audit WHERE task_id = $1 AND run_id = $2 AND status <> 'started'
		   ORDER BY id DESC LIMIT 1`, dataset, runID).Scan(&status, &rows)
		if err == nil && status == want {
			if rows == "" {
				return status, nil
			}
			return status + ": " + rows, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no audit row %q for run %s (last: %q, %v)", want, runID, status, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitDeadLetter waits for the n-th dead letter and describes it.
func waitDeadLetter(ctx context.Context, dlq jetstream.Stream, n int) (string, error) {
	for {
		info, err := dlq.Info(ctx)
		if err == nil && info.State.Msgs >= uint64(n) {
			m, err := dlq.GetMsg(ctx, info.State.LastSeq)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("dead letter on %s, kind %s, after %s delivery: %s", m.Subject,
				m.Header.Get(deadletter.HeaderErrorKind), m.Header.Get(deadletter.HeaderDeliveries), m.Header.Get(deadletter.HeaderError)), nil
		}
		select {
		case <-ctx.Done():
			return "", errors.New("no dead letter arrived")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	if j := strings.Index(s, end); j >= 0 {
		return s[:j]
	}
	return s
}

func printAudit(ctx context.Context, w io.Writer, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `SELECT id, task_id, partition_key, run_id, status, attempt,
	       coalesce(row_count::text, '-'), coalesce(triggered_by, '-'), coalesce(left(error, 60), '') FROM idem.pipeline_audit ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tDATASET\tPARTITION\tRUN_ID\tSTATUS\tATTEMPT\tROWS\tTRIGGERED_BY\tERROR")
	for rows.Next() {
		var id int64
		var ds, part, run, status, rc, by, msg string
		var attempt int
		if err := rows.Scan(&id, &ds, &part, &run, &status, &attempt, &rc, &by, &msg); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", id, ds, part, run, status, attempt, rc, by, strings.ReplaceAll(msg, "\n", " "))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return tw.Flush()
}

// devFiles lands a partition as files, publishes its event before the
// upstream's marker, shows that the event waits (no attempt spent), then
// writes the marker and waits for the load.
func (e *env) devFiles(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, landing string) error {
	dir := filepath.Join(landing, "dt=2026-11-28")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	csv := "order_id,total,status\n1,10.50,paid\n2,7.25,placed\n3,99.00,shipped\n"
	if err := os.WriteFile(filepath.Join(dir, "part-0001.csv"), []byte(csv), 0o644); err != nil {
		return err
	}
	body := `{"dataset":"landed_orders","partition":"2026-11-28","run_id":"scheduled__2026-11-28"}`
	fmt.Fprintf(e.out, "\n> files landed in %s, but not yet its _SUCCESS marker\n  publish idem.ready.landed_orders %s\n", dir, body)
	if _, err := js.Publish(ctx, "idem.ready.landed_orders", []byte(body)); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(3 * time.Second):
	}
	var attempts int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'landed_orders'").Scan(&attempts); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "  waiting for the marker: %d attempt(s) spent, nothing dead-lettered\n", attempts)
	fmt.Fprintf(e.out, "\n> the upstream writes %s\n", filepath.Join(dir, "_SUCCESS"))
	if err := os.WriteFile(filepath.Join(dir, "_SUCCESS"), nil, 0o644); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := waitAudit(wctx, pool, body, audit.StatusSuccess)
	if err != nil {
		return fmt.Errorf("the file partition: %w", err)
	}
	fmt.Fprintf(e.out, "  %s\n", got)
	var url string
	var rows int64
	if err := pool.QueryRow(ctx, "SELECT url, rows_read FROM idem.source_files WHERE task_id = 'landed_orders' ORDER BY audit_id DESC, ordinal LIMIT 1").Scan(&url, &rows); err == nil {
		fmt.Fprintf(e.out, "  idem.source_files: %s, %d rows read\n", url, rows)
	}
	return nil
}
