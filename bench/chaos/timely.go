package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// With Options.Timely the campaign's world moves on its own: events that
// come before their rows (a dataset with ready_when), rows corrected with
// no event at all (a dataset with recheck), and an operator pausing a
// busy dataset for a few seconds, again and again, outages or not.
const (
	earlyDataset   = "early"     // ready_when: its rows come after its event
	recheckDataset = "rechecked" // recheck: its rows change with no event
	pausedDataset  = "replace"   // paused and resumed by the operator
	pauseHold      = 4 * time.Second
)

// earlyFirstDay is the early dataset's partition 0: its partitions are its
// own, far from the other datasets'.
var earlyFirstDay = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

const timelySQL = `
CREATE TABLE staging.early_src (id bigint PRIMARY KEY, event_date date NOT NULL, amount numeric(12,2) NOT NULL, note text NOT NULL, version int NOT NULL);
CREATE TABLE staging.early_ready (event_date date PRIMARY KEY, ready_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE analytics.early (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, version int);
CREATE TABLE staging.recheck_src (id bigint PRIMARY KEY, event_date date NOT NULL, amount numeric(12,2) NOT NULL, note text NOT NULL, version int NOT NULL);
CREATE TABLE analytics.rechecked (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, version int);
`

// earlyPart is one partition of the early dataset: its event is published
// at publish, its rows and ready mark written at ready (either first).
type earlyPart struct {
	p              int
	publish, ready time.Duration
	runID          string
	due            bool // its ready time has passed (under timely.mu)
}

// timelyItem is one step of the moving world, at its offset in the phase:
// an early partition's event or rows, a silent correction of a rechecked
// partition, or a pause.
type timelyItem struct {
	at      time.Duration
	early   *earlyPart
	rows    bool // early: the rows and the mark, not the event
	correct int  // rechecked: the partition corrected, -1 for none
	pause   bool
}

// timely is the moving world of Options.Timely; nil without it, and every
// method of a nil *timely does nothing.
type timely struct {
	o        Options
	db       *pgxpool.Pool
	bin, cfg string // idem and the administrator's config, for idem pause
	days     []string
	parts    []*earlyPart
	items    []timelyItem

	mu          sync.Mutex
	corrections int
	pauses      int
	pauseFails  int
	pauseErr    string        // the last failed pause's error
	rewritten   int           // ready marks written again (keepReady)
	every       time.Duration // keepReady's period: keepReadyEvery, shorter in tests
	lastChange  time.Time
	// pausedAt is when each idem pause that succeeded returned: the
	// operator's pause is in force from then, not from its row's since,
	// which is the transaction's start (a slow link delays the commit).
	pausedAt []time.Time
}

// setupTimely creates the datasets' tables and rows and plans the moving
// world from the seed: the early dataset's o.Partitions partitions, the
// rechecked dataset's last five UTC days (inside its window), and a pause
// of pausedDataset every 15 to 25 s.
func setupTimely(ctx context.Context, o Options, db *pgxpool.Pool) (*timely, error) {
	if !o.Timely {
		return nil, nil
	}
	if _, err := db.Exec(ctx, timelySQL); err != nil {
		return nil, fmt.Errorf("chaos: the timely datasets: %w", err)
	}
	t := &timely{o: o, db: db, bin: o.Bin, every: keepReadyEvery}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for i := 4; i >= 0; i-- {
		t.days = append(t.days, today.AddDate(0, 0, -i).Format(time.DateOnly))
	}
	for p, day := range t.days {
		if _, err := db.Exec(ctx, `INSERT INTO staging.recheck_src
			SELECT $1::bigint * 1000 + g, $2::date, g * 1.25, 'row ' || g, 0 FROM generate_series(1, 10) g`, p+1, day); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 11))
	phase := o.Duration * 7 / 10
	for p := range o.Partitions {
		at := time.Duration(rng.Int64N(int64(phase)))
		ready := at + time.Duration(rng.Int64N(int64(7*time.Second))) - time.Second
		e := &earlyPart{p: p, publish: at, ready: max(ready, 0), runID: fmt.Sprintf("early-%d-%03d", o.Seed, p)}
		t.parts = append(t.parts, e)
		t.items = append(t.items, timelyItem{at: e.publish, early: e, correct: -1}, timelyItem{at: e.ready, early: e, rows: true, correct: -1})
	}
	for at := 5 * time.Second; at < phase; at += 6*time.Second + time.Duration(rng.Int64N(int64(6*time.Second))) {
		t.items = append(t.items, timelyItem{at: at, correct: rng.IntN(len(t.days))})
	}
	for at := 10 * time.Second; at < phase; at += 15*time.Second + time.Duration(rng.Int64N(int64(10*time.Second))) {
		t.items = append(t.items, timelyItem{at: at, pause: true, correct: -1})
	}
	slices.SortStableFunc(t.items, func(a, b timelyItem) int { return cmp.Compare(a.at, b.at) })
	return t, nil
}

func earlyKey(p int) string { return earlyFirstDay.AddDate(0, 0, p).Format(time.DateOnly) }

// yaml is the timely datasets' config.
func (t *timely) yaml() string {
	if t == nil {
		return ""
	}
	src := func(table string) string {
		return "SELECT " + columns + " FROM " + table + " WHERE event_date = @partition"
	}
	return fmt.Sprintf(`  %[1]s:
    strategy: delete_insert
    target: analytics.early
    partition_column: event_date
    source: %[2]s
    ready_when: SELECT EXISTS (SELECT 1 FROM staging.early_ready WHERE event_date = @partition)
    wait_up_to: 10m
    retry_delay: %[5]s
    max_retry_delay: %[6]s
    timeout: 20s
  %[3]s:
    strategy: delete_insert
    target: analytics.rechecked
    partition_column: event_date
    source: %[4]s
    recheck:
      window: 7d
      every: 3s
    retry_delay: %[5]s
    max_retry_delay: %[6]s
    timeout: 20s
`, earlyDataset, src("staging.early_src"), recheckDataset, src("staging.recheck_src"), RetryDelay, MaxRetryDelay)
}

// run carries the moving world out from start: at the phase's start one
// event per rechecked partition, then the items in order. cfg is a config
// the administrator's role reads, for idem pause. faultsOver is closed
// once the nemesis is done; done, once the keeper of ready marks has made
// its last pass after both.
func (t *timely) run(ctx context.Context, start time.Time, js jetstream.JetStream, cfg string, faultsOver <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	if t == nil {
		close(done)
		return done
	}
	t.cfg = cfg
	over, keeping := make(chan struct{}), make(chan struct{})
	go func() { defer close(keeping); t.keepReady(ctx, over) }()
	go func() {
		// Every item sent: once the faults are over too, the keeper makes
		// its last pass.
		defer func() {
			select {
			case <-faultsOver:
			case <-ctx.Done():
			}
			close(over)
			<-keeping
			close(done)
		}()
		for _, day := range t.days {
			publishRaw(ctx, js, recheckDataset, day, fmt.Sprintf("rc-%d-%s", t.o.Seed, day))
		}
		for _, it := range t.items {
			if d := time.Until(start.Add(it.at)); d > 0 {
				sleepCtx(ctx, d)
			}
			if ctx.Err() != nil {
				return
			}
			switch {
			case it.early != nil && it.rows:
				t.mu.Lock()
				it.early.due = true
				t.mu.Unlock()
				t.makeReady(ctx, it.early)
			case it.early != nil:
				publishRaw(ctx, js, earlyDataset, earlyKey(it.early.p), it.early.runID)
			case it.correct >= 0:
				t.correct(ctx, it.correct)
			case it.pause:
				t.pause(ctx)
			}
		}
	}()
	return done
}

// publishRaw publishes one event as a scheduler would: again until acked.
func publishRaw(ctx context.Context, js jetstream.JetStream, dataset, partition, runID string) {
	for ctx.Err() == nil {
		msg := nats.NewMsg("idem.ready." + dataset)
		msg.Data = validBody(dataset, partition, runID)
		msg.Header.Set(jetstream.MsgIDHeader, dataset+"/"+partition+"/"+runID)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.PublishMsg(pctx, msg)
		cancel()
		if err == nil {
			return
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// retrySQL runs fn until it succeeds or a minute has passed: the warehouse
// may be down for a fault.
func retrySQL(ctx context.Context, fn func(ctx context.Context) error) error {
	return retrySQLWithin(ctx, time.Minute, fn)
}

// retrySQLWithin is retrySQL, trying for within.
func retrySQLWithin(ctx context.Context, within time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := fn(qctx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// makeReady writes an early partition's rows and, in the same
// transaction, its ready mark.
func (t *timely) makeReady(ctx context.Context, e *earlyPart) {
	_ = retrySQL(ctx, func(ctx context.Context) error {
		_, err := t.db.Exec(ctx, `WITH rows AS (INSERT INTO staging.early_src
				SELECT $1::bigint * 1000 + g, $2::date, g * 2.5, 'early ' || g, 0 FROM generate_series(1, 8) g
				ON CONFLICT (id) DO NOTHING)
			INSERT INTO staging.early_ready (event_date) VALUES ($2::date) ON CONFLICT DO NOTHING`, int64(e.p+1), earlyKey(e.p))
		return err
	}) // one that gave up is written again by keepReady
}

// keepReady writes again, every keepReadyEvery, the rows and mark of each
// early partition whose ready time has passed and whose mark the warehouse
// does not hold: as an upstream job reruns when its output is gone. A
// failover can lose a mark that committed on the old primary only, and
// makeReady gives up after a minute-long outage; either would leave the
// event waiting past its wait_up_to and dead-lettered, rightly, as
// not_ready (seen in a full campaign). It returns when ctx ends, or after
// the first whole pass that began once over was closed (every item sent,
// no fault to come): nothing can lose a mark after that pass.
func (t *timely) keepReady(ctx context.Context, over <-chan struct{}) {
	for ctx.Err() == nil {
		sleepCtx(ctx, t.every)
		final := false
		select {
		case <-over:
			final = true
		default:
		}
		due := map[string]*earlyPart{}
		t.mu.Lock()
		for _, e := range t.parts {
			if e.due {
				due[earlyKey(e.p)] = e
			}
		}
		t.mu.Unlock()
		if len(due) == 0 {
			if final {
				return
			}
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rows, err := t.db.Query(qctx, `SELECT d::text FROM unnest($1::date[]) d
			WHERE NOT EXISTS (SELECT 1 FROM staging.early_ready r WHERE r.event_date = d)`, slices.Collect(maps.Keys(due)))
		var missing []string
		if err == nil {
			missing, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		cancel()
		if err != nil {
			continue
		}
		for _, k := range missing {
			t.mu.Lock()
			t.rewritten++
			t.mu.Unlock()
			t.makeReady(ctx, due[k])
		}
		if final {
			return
		}
	}
}

// keepReadyEvery is how often keepReady looks for lost ready marks.
const keepReadyEvery = 5 * time.Second

// correct changes a rechecked partition's rows, with no event.
func (t *timely) correct(ctx context.Context, p int) {
	err := retrySQL(ctx, func(ctx context.Context) error {
		_, err := t.db.Exec(ctx, `UPDATE staging.recheck_src SET version = version + 1, amount = amount + 1
			WHERE event_date = $1::date`, t.days[p])
		return err
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		t.corrections++
		t.lastChange = time.Now()
	}
}

// pauseWithin is how long an operator tries idem pause: a minute past the
// longest warehouse outage the campaign makes (idem pause writes its row
// in the warehouse; one set during an outage fails with the reason, and is
// run again).
func (t *timely) pauseWithin() time.Duration {
	return max(t.o.WarehouseDownMax, DefaultWarehouseDownMax) + time.Minute
}

// pause pauses pausedDataset for pauseHold with idem pause, as an
// operator would, again until the command succeeds (the warehouse may be
// down).
func (t *timely) pause(ctx context.Context) {
	err := retrySQLWithin(ctx, t.pauseWithin(), func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, t.bin, "pause", pausedDataset, "--config", t.cfg,
			"--reason", "chaos: an operator's pause", "--until", pauseHold.String()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.pauseFails++
		t.pauseErr = err.Error()
		return
	}
	t.pauses++
	t.pausedAt = append(t.pausedAt, time.Now())
}

// pauseTimes are when the pauses that succeeded returned; none without the
// timely datasets.
func (t *timely) pauseTimes() []time.Time {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.pausedAt)
}

// settle waits until every rechecked partition equals its rows again (a
// recheck pass found the last corrections), at most a minute after the
// last one; the early partitions are settled by the drain.
func (t *timely) settle(ctx context.Context, r *Report) {
	if t == nil {
		return
	}
	deadline := time.Now().Add(time.Minute)
	for {
		diff, err := t.recheckDiff(ctx)
		if err == nil && diff == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.violate("rechecked partitions still differ from their rows a minute after the settle (%d rows; %v): a recheck did not reload them", diff, err)
			return
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

// recheckDiff counts the rows in which the rechecked target and its source
// differ, both ways.
func (t *timely) recheckDiff(ctx context.Context) (int, error) {
	var n int
	err := t.db.QueryRow(ctx, `SELECT count(*) FROM (
		(SELECT `+columns+` FROM staging.recheck_src EXCEPT ALL SELECT `+columns+` FROM analytics.rechecked)
		UNION ALL
		(SELECT `+columns+` FROM analytics.rechecked EXCEPT ALL SELECT `+columns+` FROM staging.recheck_src)) d`).Scan(&n)
	return n, err
}

// TimelyFigures are the moving world's.
type TimelyFigures struct {
	EarlyPartitions int `json:"early_partitions"`
	// MarksRewritten counts the ready marks the workload wrote again
	// because the warehouse had lost them (a failover) or never got them.
	MarksRewritten int `json:"marks_rewritten"`
	// EarlyWaited counts the early events that waited for their rows.
	EarlyWaited int `json:"early_waited"`
	// EarlyBeforeReady counts loads of an early partition that started
	// before its rows were marked ready: each a violation.
	EarlyBeforeReady int `json:"early_before_ready"`
	Corrections      int `json:"silent_corrections"`
	RecheckReloads   int `json:"recheck_reloads"`
	Pauses           int `json:"pauses"`
	PauseFails       int `json:"pause_fails"`
	// LoadsWhilePaused counts attempts of the paused dataset that started
	// while a pause was in force, past the time the replicas take to read
	// it: each a violation.
	LoadsWhilePaused int `json:"loads_while_paused"`
}

// check holds the moving world to what idem promises: every early
// partition loaded once, its run once, never before its rows were ready,
// its table equal to its rows; the rechecked table equal to its rows,
// through recheck reloads; no attempt of the paused dataset started while
// a pause was in force (a second after it was set: the replicas read the
// pauses every second).
func (t *timely) check(ctx context.Context, db querier, r *Report) error {
	if t == nil {
		return nil
	}
	f := &TimelyFigures{EarlyPartitions: len(t.parts), Corrections: t.corrections, Pauses: t.pauses, PauseFails: t.pauseFails, MarksRewritten: t.rewritten}
	r.Timely = f
	if t.pauseFails > 0 {
		r.violate("%d pauses could not be set within %s, the last with: %s", t.pauseFails, t.pauseWithin(), cut(t.pauseErr, 300))
	}
	q := func(dst *int, sql string, args ...any) error {
		if err := db.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
			return fmt.Errorf("chaos: timely check: %w", err)
		}
		return nil
	}
	var diff int
	if err := q(&diff, `SELECT count(*) FROM (
		(SELECT `+columns+` FROM staging.early_src EXCEPT ALL SELECT `+columns+` FROM analytics.early)
		UNION ALL
		(SELECT `+columns+` FROM analytics.early EXCEPT ALL SELECT `+columns+` FROM staging.early_src)) d`); err != nil {
		return err
	}
	if diff > 0 {
		r.violate("the early dataset differs from its rows in %d rows", diff)
	}
	var once int
	if err := q(&once, `SELECT count(*) FROM idem.run_ledger WHERE dag_id = $1 AND task_id = $2 AND loads = 1`, pipeline, earlyDataset); err != nil {
		return err
	}
	if once != len(t.parts) {
		r.violate("%d of %d early partitions' runs loaded exactly once", once, len(t.parts))
	}
	if err := q(&f.EarlyBeforeReady, `SELECT count(*) FROM idem.pipeline_audit a
		JOIN staging.early_ready r ON r.event_date = a.partition_key::date
		WHERE a.dag_id = $1 AND a.task_id = $2 AND a.status = 'success' AND a.started_at < r.ready_at`, pipeline, earlyDataset); err != nil {
		return err
	}
	if f.EarlyBeforeReady > 0 {
		r.violate("%d loads of the early dataset started before their rows were ready", f.EarlyBeforeReady)
	}
	if err := q(&f.EarlyWaited, `SELECT count(DISTINCT partition_key) FROM idem.source_waits WHERE dag_id = $1 AND task_id = $2`,
		pipeline, earlyDataset); err != nil {
		return err
	}
	diff, err := t.recheckDiff(ctx)
	if err != nil {
		return err
	}
	if diff > 0 {
		r.violate("the rechecked dataset differs from its rows in %d rows", diff)
	}
	if err := q(&f.RecheckReloads, `SELECT count(*) FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = $2
		AND status = 'success' AND run_id LIKE 'recheck\_\_%'`, pipeline, recheckDataset); err != nil {
		return err
	}
	if t.corrections > 0 && f.RecheckReloads == 0 {
		r.violate("%d silent corrections and no recheck reload", t.corrections)
	}
	if f.LoadsWhilePaused, err = t.loadsWhilePaused(ctx, db); err != nil {
		return fmt.Errorf("chaos: timely check: %w", err)
	}
	if f.LoadsWhilePaused > 0 {
		r.violate("%d attempts of %s started while it was paused", f.LoadsWhilePaused, pausedDataset)
	}
	if t.pauses == 0 && t.o.Duration >= 30*time.Second {
		r.violate("no pause was set: the campaign proves nothing about pauses")
	}
	return nil
}

// isTimelyDataset says whether dataset is one of the moving world's,
// which check judges instead of the default checks.
func isTimelyDataset(dataset string) bool {
	return dataset == earlyDataset || dataset == recheckDataset
}

// loadsWhilePaused counts the attempts of pausedDataset that started while
// one of its pauses was in force: from the later of its since and the
// return of the command that set it (a pause whose command failed is left
// out: its commit time is unknown), plus the second the replicas take to
// read it, until it ended.
func (t *timely) loadsWhilePaused(ctx context.Context, db querier) (int, error) {
	t.mu.Lock()
	returned := slices.Clone(t.pausedAt)
	t.mu.Unlock()
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM idem.pipeline_audit a
		JOIN idem.dataset_pauses p ON p.dag_id = a.dag_id AND p.task_id = a.task_id
		CROSS JOIN LATERAL (SELECT min(r) AS at FROM unnest($3::timestamptz[]) r WHERE r >= p.since) ret
		WHERE a.dag_id = $1 AND a.task_id = $2
		  AND a.started_at >= greatest(p.since, coalesce(ret.at, 'infinity')) + interval '1.5 seconds'
		  AND a.started_at < coalesce(p.resumed_at, p.until)`, pipeline, pausedDataset, returned).Scan(&n)
	return n, err
}
