package cli

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/localpg"
)

//go:embed devdata/idem.dev.yaml
var devConfig []byte

//go:embed devdata/schema.sql
var devSchema string

func devCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Run the demo pipeline on a throwaway PostgreSQL (or IDEM_DATABASE_URL)",
		Long: `Start a throwaway PostgreSQL from the local binaries (or use IDEM_DATABASE_URL),
create the idem schema and demo tables, and play a short scenario through the
same handler 'idem serve' uses: a load per strategy, a duplicate delivery, a
replay with a new run_id, and a poison event. Prints the audit rows.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.dev(cmd.Context())
		},
	}
}

type devEnv struct {
	pool    *pgxpool.Pool
	cfg     *config.Config
	handler *handlers.Handler
	close   func()
}

// startDev brings up the database side of the demo.
func (e *env) startDev(ctx context.Context) (*devEnv, error) {
	d := &devEnv{close: func() {}}
	url := e.getenv("IDEM_DATABASE_URL")
	if url == "" {
		fmt.Fprintln(e.out, "starting a throwaway PostgreSQL...")
		srv, err := localpg.Start(ctx, localpg.Options{})
		if err != nil {
			return nil, err
		}
		d.close = func() { _ = srv.Close() }
		url = srv.URL("postgres")
		fmt.Fprintf(e.out, "PostgreSQL on 127.0.0.1:%d (removed on exit)\n", srv.Port)
	}
	pool, err := connect(ctx, url)
	if err != nil {
		d.close()
		return nil, err
	}
	d.pool = pool
	closeDB := d.close
	d.close = func() { pool.Close(); closeDB() }
	if _, err := audit.Migrate(ctx, pool); err != nil {
		d.close()
		return nil, err
	}
	if _, err := pool.Exec(ctx, devSchema); err != nil {
		d.close()
		return nil, fmt.Errorf("demo tables: %w", err)
	}
	cfg, err := config.Parse(devConfig, nil)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		d.close()
		return nil, fmt.Errorf("demo config: %w", err)
	}
	d.cfg = cfg
	dss, err := datasets(cfg)
	if err != nil {
		d.close()
		return nil, err
	}
	d.handler = &handlers.Handler{DB: pool, Pipeline: cfg.Pipeline, Datasets: dss, Log: zerolog.Nop()}
	for name, err := range d.handler.Prepare(ctx) {
		d.close()
		return nil, fmt.Errorf("dataset %s: %w", name, err)
	}
	return d, nil
}

func (e *env) dev(ctx context.Context) error {
	d, err := e.startDev(ctx)
	if err != nil {
		return err
	}
	defer d.close()

	step := func(title, subject, body string) {
		fmt.Fprintf(e.out, "\n> %s\n  %s %s\n", title, subject, body)
		out, err := d.handler.HandleMessage(ctx, subject, []byte(body), handlers.Meta{Attempt: 1})
		switch {
		case err != nil && handlers.IsFatal(err):
			fmt.Fprintf(e.out, "  fatal, would go to the dead-letter stream: %v\n", err)
		case err != nil:
			fmt.Fprintf(e.out, "  transient, would be retried: %v\n", err)
		default:
			fmt.Fprintf(e.out, "  %s: %d inserted, %d updated, %s deleted (route %s)\n", out.Status,
				out.Rows.Inserted, out.Rows.Updated, deletedText(out.Rows.Deleted), orDash(out.Rows.Route))
		}
	}
	step("load orders for 2026-11-28", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-28","run_id":"scheduled__2026-11-28"}`)
	step("the same event delivered again: no work, recorded as skipped", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-28","run_id":"scheduled__2026-11-28"}`)
	step("a manual replay with a new run_id: the partition is replaced, not doubled", "idem.ready.orders", `{"dataset":"orders","partition":"2026-11-28","run_id":"manual__replay"}`)
	step("merge customers updated on 2026-11-28", "idem.ready.customers", `{"dataset":"customers","partition":"2026-11-28","run_id":"scheduled__2026-11-28"}`)
	step("merge them again: unchanged rows are not rewritten", "idem.ready.customers", `{"dataset":"customers","partition":"2026-11-28","run_id":"manual__again"}`)
	step("append events of 2026-11-27", "idem.ready.events", `{"dataset":"events","partition":"2026-11-27","run_id":"r2"}`)
	step("append them again under an older-looking run_id: the view still shows one row per event", "idem.ready.events", `{"dataset":"events","partition":"2026-11-27","run_id":"r1"}`)
	step("a poison event: 2026-02-30 is not a date", "idem.ready.orders", `{"dataset":"orders","partition":"2026-02-30","run_id":"bad"}`)
	step("a partition with no source rows is refused, never a silent wipe", "idem.ready.orders", `{"dataset":"orders","partition":"2027-01-01","run_id":"empty"}`)

	var n int64
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM analytics.fact_orders").Scan(&n); err == nil {
		fmt.Fprintf(e.out, "\nanalytics.fact_orders holds %d rows (25 per loaded day, never doubled)\n", n)
	}
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM raw.latest_events").Scan(&n); err == nil {
		fmt.Fprintf(e.out, "raw.latest_events shows %d events (raw.events keeps every appended copy)\n", n)
	}
	fmt.Fprintln(e.out, "\nidem.pipeline_audit:")
	return printAudit(ctx, e.out, d.pool)
}

func printAudit(ctx context.Context, w io.Writer, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `SELECT id, task_id, partition_key, run_id, status, attempt,
	       coalesce(row_count::text, '-'), coalesce(left(error, 70), '') FROM idem.pipeline_audit ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tDATASET\tPARTITION\tRUN_ID\tSTATUS\tATTEMPT\tROWS\tERROR")
	for rows.Next() {
		var id int64
		var ds, part, run, status, rc, msg string
		var attempt int
		if err := rows.Scan(&id, &ds, &part, &run, &status, &attempt, &rc, &msg); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", id, ds, part, run, status, attempt, rc, strings.ReplaceAll(msg, "\n", " "))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return tw.Flush()
}

func deletedText(n int64) string {
	if n < 0 {
		return "all (truncate)"
	}
	return fmt.Sprint(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
