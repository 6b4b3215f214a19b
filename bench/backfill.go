package bench

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5"
)

const backfillBase = "2025-01-01"

var dailyDS = dataset{
	Name: "daily", Strategy: "delete_insert", Target: "bench.daily_t", PartitionColumn: "event_date",
	Source: "SELECT " + rowCols + " FROM bench.daily_src WHERE event_date = @partition",
}

// runBackfill is phase (d): `idem backfill --reprocess all --wait` of every
// daily partition into an empty target (with a new run_id each time), at each max_in_flight, against the bare DELETE +
// INSERT .. SELECT of the same partitions by as many pgx workers.
func (e *env) runBackfill(ctx context.Context) error {
	days, rows := e.sizes.BackfillDays, e.sizes.BackfillRows
	e.logf("backfill: %d partitions of %d rows", days, rows)
	if err := e.exec(ctx,
		"CREATE TABLE bench.daily_src "+rowDDL,
		"INSERT INTO bench.daily_src "+rowsSQL(backfillBase, 0, days, rows),
		"CREATE INDEX ON bench.daily_src (event_date)",
		"CREATE TABLE bench.daily_t "+rowDDL,
		"CREATE INDEX ON bench.daily_t (event_date)",
		"VACUUM ANALYZE bench.daily_src, bench.daily_t",
	); err != nil {
		return err
	}
	for _, c := range e.sizes.BackfillInFlight {
		e.sampleLoad(fmt.Sprintf("backfill c=%d", c))
		p := BackfillPoint{InFlight: c, Partitions: days, Rows: rows}
		bare, err := e.bareBackfill(ctx, c, days)
		if err != nil {
			return err
		}
		p.BareSeconds = bare.Seconds()
		if err := e.idemBackfill(ctx, c, &p); err != nil {
			return fmt.Errorf("backfill, max_in_flight %d: %w", c, err)
		}
		e.res.Backfill = append(e.res.Backfill, p)
	}
	return nil
}

func (e *env) freshDaily(ctx context.Context) error {
	return e.exec(ctx, "TRUNCATE bench.daily_t", "VACUUM ANALYZE idem.pipeline_audit, idem.run_ledger", "CHECKPOINT")
}

func (e *env) bareBackfill(ctx context.Context, c, days int) (time.Duration, error) {
	if err := e.freshDaily(ctx); err != nil {
		return 0, err
	}
	conns := make([]*pgx.Conn, c)
	for i := range conns {
		var err error
		if conns[i], err = pgx.Connect(ctx, e.dbURL); err != nil {
			return 0, err
		}
		defer conns[i].Close(context.WithoutCancel(ctx))
	}
	return runClosed(ctx, c, days, func(ctx context.Context, w, i int) error {
		d := day(backfillBase, i)
		return pgx.BeginFunc(ctx, conns[w], func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "DELETE FROM bench.daily_t WHERE event_date = $1", d); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO bench.daily_t ("+rowCols+") SELECT "+rowCols+" FROM bench.daily_src WHERE event_date = $1", d)
			return err
		})
	})
}

func (e *env) idemBackfill(ctx context.Context, c int, p *BackfillPoint) error {
	if err := e.freshDaily(ctx); err != nil {
		return err
	}
	name := fmt.Sprintf("backfill-c%d", c)
	proc, err := e.startIdem(ctx, name, c, []dataset{dailyDS})
	if err != nil {
		return err
	}
	defer proc.kill()
	run := fmt.Sprintf("bf-c%d", c)
	from, to := dayKey(backfillBase, 0), dayKey(backfillBase, p.Partitions-1)
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, e.idemBin, "backfill", "daily", "--config", proc.cfg, "--from", from, "--to", to,
		"--run-id", run, "--reprocess", "all", "--wait", "--timeout", "1h")
	cmd.Env = childEnv()
	out, cmdErr := cmd.CombinedOutput()
	p.CommandSeconds = time.Since(t0).Seconds()
	p.Publisher = "idem backfill --wait"
	if cmdErr != nil {
		// `idem backfill` is not there or failed: publish the events ourselves,
		// so the load figures still come out, and say so.
		e.res.note("idem backfill failed at max_in_flight %d (%v): the harness published the %d events itself. Output: %s",
			c, cmdErr, p.Partitions, abbrev(string(out)))
		p.Publisher = "harness (idem backfill failed)"
		p.CommandSeconds = 0
		if err := e.freshDaily(ctx); err != nil {
			return err
		}
		evs := make([]event, p.Partitions)
		for i := range evs {
			evs[i] = event{"daily", dayKey(backfillBase, i), run}
		}
		if t0, _, err = e.publishBurst(ctx, "", evs); err != nil {
			return err
		}
	}
	// A fresh stream: the partitions are sequences 1..Partitions.
	acked, err := proc.acks.wait(ctx, seqRange(1, p.Partitions), time.Hour)
	if err != nil {
		return err
	}
	if err := e.waitAudit(ctx, run, "success", p.Partitions, 10*time.Second); err != nil {
		return err
	}
	p.IdemSeconds = lastOf(acked).Sub(t0).Seconds()
	got, err := e.int64(ctx, "SELECT count(*) FROM bench.daily_t")
	if err != nil {
		return err
	}
	if want := int64(p.Partitions * p.Rows); got != want {
		return fmt.Errorf("after the backfill the target holds %d rows, want %d", got, want)
	}
	p.PeakRSSMiB = proc.peakMiB()
	e.res.Memory = append(e.res.Memory, MemSample{Phase: "backfill", InFlight: c, PeakMiB: p.PeakRSSMiB})
	return proc.stop()
}
