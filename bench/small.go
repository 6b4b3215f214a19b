package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
)

const smallBase = "2000-01-01"

var smallDS = dataset{
	Name: "small", Strategy: "delete_insert", Target: "bench.small_t", PartitionColumn: "event_date",
	Source: "SELECT " + rowCols + " FROM bench.small_src WHERE event_date = @partition",
}

const (
	floorDelete = "DELETE FROM bench.small_t WHERE event_date = $1"
	floorInsert = "INSERT INTO bench.small_t (" + rowCols + ") SELECT " + rowCols + " FROM bench.small_src WHERE event_date = $1"
	naiveInsert = "INSERT INTO bench.naive_t (" + rowCols + ") SELECT " + rowCols + " FROM bench.small_src WHERE event_date = $1"
)

// small is phase (a), (b) and (f): 10-row partitions.
type small struct {
	*env
	load, skip *template
	stepsAt    int // the max_in_flight whose replay is timed per trip
	// pipeline, when set, is the audit's pipeline name instead of the
	// harness's (the history benchmark audits under the seeded history's).
	pipeline string
}

// handler is idem's handler for the small dataset over db.
func (s *small) handler(db handlers.DB) (*handlers.Handler, error) {
	h, err := handlerFor(db, smallDS)
	if err == nil && s.pipeline != "" {
		h.Pipeline = s.pipeline
	}
	return h, err
}

func (e *env) setupSmall(ctx context.Context) error {
	p := e.sizes.Partitions
	e.logf("small: %d partitions of 10 rows", p)
	return e.exec(ctx,
		"CREATE TABLE bench.small_src "+rowDDL,
		"INSERT INTO bench.small_src "+rowsSQL(smallBase, 0, p, 10),
		"CREATE INDEX ON bench.small_src (event_date)",
		// Pre-filled: every small load is a rerun, as in the pgbench reference.
		"CREATE TABLE bench.small_t "+rowDDL,
		"INSERT INTO bench.small_t SELECT * FROM bench.small_src",
		"CREATE INDEX ON bench.small_t (event_date)",
		"CREATE TABLE bench.naive_t "+rowDDL,
		"CREATE INDEX ON bench.naive_t (event_date)",
		"VACUUM ANALYZE bench.small_src, bench.small_t, bench.naive_t",
	)
}

// handle decodes and handles one event as the consumer does.
func handle(ctx context.Context, h *handlers.Handler, ev event, seq uint64) (handlers.Outcome, error) {
	body, err := schemas.PartitionReady{Dataset: ev.dataset, Partition: ev.partition, RunID: ev.run}.Marshal()
	if err != nil {
		return handlers.Outcome{}, err
	}
	return h.HandleMessage(ctx, subjectPre+"."+ev.dataset, body, handlers.Meta{StreamSeq: seq, Stream: "IDEM_EVENTS"})
}

// capture records the round trips of one load and of one skipped duplicate.
func (s *small) capture(ctx context.Context) error {
	rec := &recorder{}
	db, err := newRecDB(ctx, s.pool, rec)
	if err != nil {
		return err
	}
	defer db.closeTraced()
	h, err := s.handler(db)
	if err != nil {
		return err
	}
	last := s.sizes.Partitions - 1
	if _, err := handle(ctx, h, event{"small", dayKey(smallBase, last-1), "idembench-warm"}, 1); err != nil {
		return fmt.Errorf("capture: warm-up load: %w", err)
	}
	// An audit id no row count or sequence can be mistaken for.
	if err := s.exec(ctx, "SELECT setval(pg_get_serial_sequence('idem.pipeline_audit', 'id'), 900000000)"); err != nil {
		return err
	}
	part, run := dayKey(smallBase, last), "idembench-capture"
	ev := event{"small", part, run}
	rec.on = true
	out, err := handle(ctx, h, ev, 4242)
	rec.on = false
	if err != nil || out.Status != audit.StatusSuccess {
		return fmt.Errorf("capture: sample load: %v (status %q)", err, out.Status)
	}
	s.load = newTemplate(rec.trips, part, run, day(smallBase, last), out.AuditID)
	rec.trips, rec.on = nil, true
	out2, err := handle(ctx, h, ev, 4243)
	rec.on = false
	if err != nil || out2.Status != audit.StatusSkipped {
		return fmt.Errorf("capture: sample duplicate: %v (status %q)", err, out2.Status)
	}
	s.skip = newTemplate(rec.trips, part, run, day(smallBase, last), 0)
	if s.load.usesAuditID() && s.load.idTrip < 0 {
		s.res.note("the captured load uses its audit id but never reads it back: the limit replay updates no audit row")
	}
	s.res.Steps = s.load.describe()
	s.logf("captured: a load is %d round trips, a skipped duplicate %d", len(s.load.trips), len(s.skip.trips))
	return nil
}

func smallEvents(prefix string, n int) []event { return eventsOf("small", prefix, n) }

// eventsOf are n events of dataset ds, one for each of the first n small
// partitions, their run ids prefix-00000 on.
func eventsOf(ds, prefix string, n int) []event {
	evs := make([]event, n)
	for i := range evs {
		evs[i] = event{ds, dayKey(smallBase, i), fmt.Sprintf("%s-%05d", prefix, i)}
	}
	return evs
}

// smallDataset is a delete_insert dataset named name over the tables
// smallTables made for tables.
func smallDataset(name, tables string) dataset {
	return dataset{Name: name, Strategy: "delete_insert", Target: "bench." + tables + "_t", PartitionColumn: "event_date",
		Source: "SELECT " + rowCols + " FROM bench." + tables + "_src WHERE event_date = @partition"}
}

// smallTables creates, through pool, the 10-row partitions of a phase of
// its own: a source bench.<tables>_src of parts partitions and a target
// bench.<tables>_t pre-filled with them (every load is a rerun, as in (a)).
func (e *env) smallTables(ctx context.Context, pool *pgxpool.Pool, tables string, parts int) error {
	src, t := "bench."+tables+"_src", "bench."+tables+"_t"
	for _, s := range []string{
		"CREATE SCHEMA IF NOT EXISTS bench",
		"CREATE TABLE " + src + " " + rowDDL,
		"INSERT INTO " + src + " " + rowsSQL(smallBase, 0, parts, 10),
		"CREATE INDEX ON " + src + " (event_date)",
		"CREATE TABLE " + t + " " + rowDDL,
		"INSERT INTO " + t + " SELECT * FROM " + src,
		"CREATE INDEX ON " + t + " (event_date)",
		"VACUUM ANALYZE " + src + ", " + t,
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("%w\nSQL: %s", err, s)
		}
	}
	return nil
}

// fresh vacuums and analyses the tables every run writes, before a run.
// Runs never share a run_id, so the audit needs no emptying (see seedAudit).
func (s *small) fresh(ctx context.Context) error {
	return s.settle(ctx, "bench.small_t", "idem.pipeline_audit", "idem.run_ledger")
}

// runSmall measures every method at each max_in_flight.
func (e *env) runSmall(ctx context.Context) error {
	if err := e.setupSmall(ctx); err != nil {
		return err
	}
	s := &small{env: e, stepsAt: e.sizes.InFlight[0]}
	if err := s.capture(ctx); err != nil {
		return err
	}
	for _, c := range e.sizes.InFlight {
		e.sampleLoad(fmt.Sprintf("small c=%d", c))
		if err := s.atConcurrency(ctx, c); err != nil {
			return fmt.Errorf("small, max_in_flight %d: %w", c, err)
		}
	}
	return nil
}

func (s *small) atConcurrency(ctx context.Context, c int) error {
	n := s.sizes.Events
	proc, err := s.startIdem(ctx, fmt.Sprintf("small-c%d", c), c, []dataset{smallDS})
	if err != nil {
		return err
	}
	defer proc.kill()
	// The floor runs on plain connections; the replayed limit and the
	// in-process handler on connections set up as idem's pool is.
	conns := make([]*pgx.Conn, c)
	idemConns := make([]*pgx.Conn, c)
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, s.dbURL); err != nil {
			return err
		}
		defer conns[i].Close(context.WithoutCancel(ctx))
		if idemConns[i], err = s.connectAsIdem(ctx); err != nil {
			return err
		}
		defer idemConns[i].Close(context.WithoutCancel(ctx))
	}
	hpool, err := s.poolAsIdem(ctx, c)
	if err != nil {
		return err
	}
	defer hpool.Close()
	h, err := handlerFor(hpool, smallDS)
	if err != nil {
		return err
	}
	if _, err := handle(ctx, h, event{"small", dayKey(smallBase, s.sizes.Partitions-2), fmt.Sprintf("warm-handler-c%d", c)}, 1); err != nil {
		return fmt.Errorf("handler warm-up: %w", err)
	}

	pt := s.res.point(c)
	floor := func() job {
		return func(ctx context.Context, w, i int) error {
			d := day(smallBase, i)
			return pgx.BeginFunc(ctx, conns[w], func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, floorDelete, d); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, floorInsert, d)
				return err
			})
		}
	}
	replay := func(t *template, evs []event, spent *tripTimes) job {
		return func(ctx context.Context, w, i int) error {
			return t.replay(ctx, idemConns[w], evs[i].partition, evs[i].run, day(smallBase, i), spent)
		}
	}
	inproc := func(evs []event, want string) job {
		return func(ctx context.Context, _, i int) error {
			out, err := handle(ctx, h, evs[i], uint64(i+1))
			if err == nil && out.Status != want {
				err = fmt.Errorf("handler: %s is %s, want %s", evs[i].run, out.Status, want)
			}
			return err
		}
	}
	closed := func(name string, evs []event, do job) error {
		return s.withCPU(pt.method(name), 0, len(evs), false, func() error {
			el, err := runClosed(ctx, c, len(evs), do)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			pt.method(name).Throughput.add(len(evs), el)
			return nil
		})
	}

	for rep := range s.sizes.Reps {
		tag := fmt.Sprintf("c%d-r%d", c, rep)
		s.logf("small c=%d rep %d: floor, pgbench, limit, handler, idem, naive", c, rep+1)
		if err := s.fresh(ctx); err != nil {
			return err
		}
		if err := closed(MFloor, smallEvents("floor-"+tag, n), floor()); err != nil {
			return err
		}
		for _, name := range []string{MPgbenchFloor, MPgbench1tx} {
			if s.pgbench == "" {
				break
			}
			if err := s.fresh(ctx); err != nil {
				return err
			}
			m := pt.method(name)
			var tps, avg float64
			// pgbench's backends exit with it: their CPU counts once reaped.
			err := s.withCPU(m, 0, n, true, func() (err error) {
				tps, avg, err = s.runPgbench(ctx, name, c, n)
				return err
			})
			if err != nil {
				return err
			}
			m.Throughput.Events = n
			m.Throughput.Runs = append(m.Throughput.Runs, tps)
			m.Throughput.PerSec = median(m.Throughput.Runs)
			m.AvgLatencyMs = avg
		}

		if err := s.fresh(ctx); err != nil {
			return err
		}
		var spent *tripTimes
		if c == s.stepsAt && rep == 0 {
			spent = &tripTimes{d: make([]time.Duration, len(s.load.trips))}
		}
		limitEvs := smallEvents("limit-"+tag, n)
		if err := closed(MLimit, limitEvs, replay(s.load, limitEvs, spent)); err != nil {
			return err
		}
		if spent != nil {
			s.recordSteps(spent.d, n)
		}
		if err := s.checkReplay(ctx, "limit-"+tag, n); err != nil {
			return err
		}
		skip := s.skipPoint(c)
		el, err := runClosed(ctx, c, n, replay(s.skip, limitEvs, nil))
		if err != nil {
			return fmt.Errorf("skip replay: %w", err)
		}
		skip.Limit.Throughput.add(n, el)

		if err := s.fresh(ctx); err != nil {
			return err
		}
		if err := closed(MHandler, smallEvents("handler-"+tag, n), inproc(smallEvents("handler-"+tag, n), audit.StatusSuccess)); err != nil {
			return err
		}

		if err := s.fresh(ctx); err != nil {
			return err
		}
		withStats := c == s.stepsAt && rep == 0 && s.stats
		if withStats {
			_ = s.exec(ctx, "SELECT pg_stat_statements_reset()")
		}
		evs := smallEvents("idem-"+tag, n)
		err = s.withCPU(pt.method(MIdem), proc.cmd.Process.Pid, n, false, func() error {
			el, err := s.idemRun(ctx, proc, evs, "idem-"+tag, audit.StatusSuccess)
			if err == nil {
				pt.method(MIdem).Throughput.add(n, el)
			}
			return err
		})
		if err != nil {
			return err
		}
		if withStats {
			s.recordStatements(ctx, n)
		}
		// (f): the same events again; every run already succeeded.
		el, err = s.idemRun(ctx, proc, evs, "idem-"+tag, audit.StatusSkipped)
		if err != nil {
			return fmt.Errorf("skipped duplicates: %w", err)
		}
		skip.Idem.Throughput.add(n, el)

		el, _, err = s.runNaive(ctx, c, smallEvents("naive-"+tag, n), 0)
		if err != nil {
			return err
		}
		pt.method(MNaive).Throughput.add(n, el)
	}

	// Latency under a paced load, the same rate for every method: half of
	// what idem sustained, so the queue stays short.
	rate := pt.method(MIdem).Throughput.PerSec / 2
	pn := s.sizes.PacedEvents
	s.logf("small c=%d: paced latency at %.0f events/s", c, rate)
	paced := func(name string, evs []event, do job) error {
		if err := s.fresh(ctx); err != nil {
			return err
		}
		lat, err := runOpen(ctx, c, len(evs), rate, do)
		if err != nil {
			return fmt.Errorf("%s paced: %w", name, err)
		}
		pt.method(name).Latency = latencyOf(lat, rate)
		return nil
	}
	tag := fmt.Sprintf("c%d-paced", c)
	if err := paced(MFloor, smallEvents("floor-"+tag, pn), floor()); err != nil {
		return err
	}
	limitEvs := smallEvents("limit-"+tag, pn)
	if err := paced(MLimit, limitEvs, replay(s.load, limitEvs, nil)); err != nil {
		return err
	}
	lat, err := runOpen(ctx, c, pn, rate, replay(s.skip, limitEvs, nil))
	if err != nil {
		return err
	}
	s.skipPoint(c).Limit.Latency = latencyOf(lat, rate)
	handlerEvs := smallEvents("handler-"+tag, pn)
	if err := paced(MHandler, handlerEvs, inproc(handlerEvs, audit.StatusSuccess)); err != nil {
		return err
	}
	if err := s.fresh(ctx); err != nil {
		return err
	}
	idemEvs := smallEvents("idem-"+tag, pn)
	if pt.method(MIdem).Latency, err = s.idemPaced(ctx, proc, idemEvs, "idem-"+tag, audit.StatusSuccess, rate); err != nil {
		return err
	}
	if s.skipPoint(c).Idem.Latency, err = s.idemPaced(ctx, proc, idemEvs, "idem-"+tag, audit.StatusSkipped, rate); err != nil {
		return err
	}
	if _, lat, err = s.runNaive(ctx, c, smallEvents("naive-"+tag, pn), rate); err != nil {
		return err
	}
	pt.method(MNaive).Latency = latencyOf(lat, rate)

	// (b): every event delivered twice.
	if err := s.duplicates(ctx, proc, c); err != nil {
		return err
	}
	peak := proc.peakMiB()
	if err := proc.stop(); err != nil {
		return err
	}
	s.res.Memory = append(s.res.Memory, MemSample{Phase: "small events", InFlight: c, PeakMiB: peak})
	return nil
}

func (s *small) skipPoint(c int) *SkipPoint {
	for i := range s.res.Skipped {
		if s.res.Skipped[i].InFlight == c {
			return &s.res.Skipped[i]
		}
	}
	s.res.Skipped = append(s.res.Skipped, SkipPoint{InFlight: c})
	return &s.res.Skipped[len(s.res.Skipped)-1]
}

// checkReplay makes sure the replay did what idem does: one success per event.
func (s *small) checkReplay(ctx context.Context, prefix string, n int) error {
	got, err := s.int64(ctx, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id LIKE $1 || '%' AND status = 'success'", prefix)
	if err != nil {
		return err
	}
	if got != int64(n) {
		return fmt.Errorf("the replayed limit left %d successful audit rows for %d events: the capture of idem's SQL needs attention (bench/capture.go)", got, n)
	}
	return nil
}

// idemRun publishes evs at once to proc, waits for every ack, checks each
// event has an audit row with status, and returns the time from the first
// publish to the last ack.
func (s *small) idemRun(ctx context.Context, proc *idemProc, evs []event, prefix, status string) (time.Duration, error) {
	t0, seqs, err := s.publishBurst(ctx, "", evs)
	if err != nil {
		return 0, err
	}
	acked, err := proc.acks.wait(ctx, seqs, 2*time.Minute+time.Duration(len(evs))*20*time.Millisecond)
	if err != nil {
		return 0, fmt.Errorf("%w\n%s", err, proc.tail())
	}
	if err := s.waitAudit(ctx, prefix, status, len(evs), 10*time.Second); err != nil {
		return 0, err
	}
	return lastOf(acked).Sub(t0), nil
}

// idemPaced publishes evs at rate and returns each one's latency from its
// publish to idem's ack, which follows the load's commit.
func (s *small) idemPaced(ctx context.Context, proc *idemProc, evs []event, prefix, status string, rate float64) (*Latency, error) {
	at, seqs, err := s.publishPaced(ctx, "", evs, rate)
	if err != nil {
		return nil, err
	}
	acked, err := proc.acks.wait(ctx, seqs, 2*time.Minute+time.Duration(len(evs))*20*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, proc.tail())
	}
	if err := s.waitAudit(ctx, prefix, status, len(evs), 10*time.Second); err != nil {
		return nil, err
	}
	lat := make([]time.Duration, len(evs))
	for i := range evs {
		lat[i] = acked[i].Sub(at[i])
	}
	return latencyOf(lat, rate), nil
}

// duplicates is (b): the same events, each published twice in a row, to idem
// and to the naive consumer.
func (s *small) duplicates(ctx context.Context, proc *idemProc, c int) error {
	n := s.sizes.Events
	s.logf("small c=%d: every event delivered twice", c)
	one := smallEvents(fmt.Sprintf("dup-c%d", c), n)
	two := make([]event, 0, 2*n)
	for _, ev := range one {
		two = append(two, ev, ev)
	}
	if err := s.fresh(ctx); err != nil {
		return err
	}
	p := DupPoint{InFlight: c, Messages: 2 * n}
	el, err := s.idemRun(ctx, proc, two, fmt.Sprintf("dup-c%d", c), "")
	if err != nil {
		return err
	}
	p.IdemPerSec = float64(2*n) / el.Seconds()
	// Only this run's partitions: idem reloaded each of them, whatever an
	// earlier run left there (pgbench's concurrent DELETE + INSERT of one
	// partition, with no lock, can double it).
	if p.IdemDoubled, err = s.int64(ctx, "SELECT count(*) - count(DISTINCT order_id) FROM bench.small_t WHERE event_date >= $1 AND event_date < $2",
		day(smallBase, 0), day(smallBase, n)); err != nil {
		return err
	}
	if p.IdemSkipped, err = s.int64(ctx, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id LIKE $1 || '%' AND status = 'skipped'",
		fmt.Sprintf("dup-c%d", c)); err != nil {
		return err
	}
	el, _, err = s.runNaive(ctx, c, two, 0)
	if err != nil {
		return err
	}
	p.NaivePerSec = float64(2*n) / el.Seconds()
	if p.NaiveDoubled, err = s.int64(ctx, "SELECT count(*) - count(DISTINCT order_id) FROM bench.naive_t"); err != nil {
		return err
	}
	s.res.Duplicates = append(s.res.Duplicates, p)
	return nil
}

func (s *small) recordSteps(spent []time.Duration, n int) {
	var total time.Duration
	for _, d := range spent {
		total += d
	}
	for i := range s.res.Steps {
		if i < len(spent) {
			s.res.Steps[i].MeanUs = float64(spent[i].Microseconds()) / float64(n)
			if total > 0 {
				s.res.Steps[i].Share = float64(spent[i]) / float64(total)
			}
		}
	}
}

// recordStatements keeps what pg_stat_statements saw during idem's run,
// minus the harness's own polling.
func (s *small) recordStatements(ctx context.Context, n int) {
	rows, err := s.pool.Query(ctx, `
		SELECT query, calls, mean_exec_time, plans, total_plan_time
		  FROM pg_stat_statements
		 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		   AND query NOT LIKE '%FILTER (WHERE status%' AND query NOT LIKE '%pg_stat_statements%'
		 ORDER BY total_exec_time + total_plan_time DESC LIMIT 20`)
	if err != nil {
		s.res.note("pg_stat_statements: %v", err)
		return
	}
	defer rows.Close()
	s.res.Statements = nil
	for rows.Next() {
		var q string
		var calls int64
		var mean, planTotal float64
		var plans int64
		if err := rows.Scan(&q, &calls, &mean, &plans, &planTotal); err != nil {
			return
		}
		st := Statement{
			Query: abbrev(q), CallsPerEvent: float64(calls) / float64(n),
			MeanUs: mean * 1000, UsPerEvent: mean * 1000 * float64(calls) / float64(n),
			PlanUsPerEvent: planTotal * 1000 / float64(n),
		}
		if calls > 0 {
			st.PlansPerCall = float64(plans) / float64(calls)
		}
		s.res.Statements = append(s.res.Statements, st)
	}
}
