package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/internal/localpg"
)

// The PostgreSQL source (Options.PGSource): a second PostgreSQL, the
// application database a dataset's `postgres:` source reads, separate from
// the warehouse, with an asynchronous streaming standby. idem reads it
// through one multi-host URL over both places with
// target_session_attrs=prefer-standby: from the standby while there is
// one, from the primary while the standby is down or after a promotion
// left none. Two datasets read the same table: src_replace
// (delete_insert, whose COPY goes straight into the target after the
// DELETE) and src_append (append_dedupe, whose raw table keeps every
// load's rows, so the checker can read each load's snapshot whole).
//
// Every partition has a fixed number of rows, more than the copy's 64 KiB
// chunk of COPY text, and a generation: a correction sets every row of
// the partition to the next generation (new values) in one transaction,
// and logs it in src.corrections. A load that read one snapshot whole
// therefore holds exactly the partition's rows, all of one generation; a
// cut copy that loaded its first chunk would hold fewer, a torn read two
// generations. The source query sleeps every 50th row (src.pace), so a
// copy streams for a few hundred milliseconds and the fault finds copies
// mid-stream.
const (
	srcDBName = "src"
	// srcMaxLag is the datasets' max_replica_lag: a standby further behind
	// holds the load (a wait, no attempt spent).
	srcMaxLag = 2 * time.Second
	// srcLagSlack is added to srcMaxLag when the checker asks which
	// corrections a load must have seen: the harness learns a commit's
	// time only when its COMMIT returns.
	srcLagSlack = time.Second
	// srcIdxBase is the index of the first source event: apart from the
	// main plan's (0 to Events-1) and the settle events' (from Events).
	srcIdxBase = 1_000_000
)

// srcDataset is one dataset over the source.
type srcDataset struct {
	name, strategy, target, visible, yaml string
}

var srcDatasets = []srcDataset{
	{name: "src_replace", strategy: "delete_insert", target: "analytics.src_replace", visible: "analytics.src_replace",
		yaml: "    partition_column: event_date\n"},
	{name: "src_append", strategy: "append_dedupe", target: "analytics.src_raw", visible: "analytics.src_latest",
		yaml: "    key: [id]\n    view: analytics.src_latest\n    partition_column: event_date\n"},
}

// srcColumns are the source's columns, in the targets' order.
const srcColumns = "id, event_date, amount, note, gen"

// srcQuery is the datasets' source query.
const srcQuery = "SELECT " + srcColumns + " FROM src.rows WHERE event_date = @partition AND src.pace(id)"

// sourceSettings are the source cluster's: a standby that falls behind
// (a restart) finds the WAL it lacks, retries fetching WAL every 200 ms,
// and reports its snapshots to the primary so that a correction's vacuum
// never cancels a copy (as docs/SOURCES.md advises).
var sourceSettings = []string{"synchronous_commit = on", "wal_keep_size = '512MB'", "wal_retrieve_retry_interval = '200ms'",
	"hot_standby_feedback = on"}

const sourceSchemaSQL = `
CREATE SCHEMA src;
CREATE TABLE src.rows (id bigint PRIMARY KEY, event_date date NOT NULL, amount numeric(12,2) NOT NULL, note text NOT NULL, gen int NOT NULL);
CREATE INDEX ON src.rows (event_date);
CREATE TABLE src.corrections (event_date date NOT NULL, gen int NOT NULL, committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (event_date, gen));
-- Sleeps 15 ms every 50th row: a partition of a thousand rows streams for
-- about 300 ms.
CREATE FUNCTION src.pace(id bigint) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF id % 50 = 0 THEN PERFORM pg_sleep(0.015); END IF;
  RETURN true;
END $$;
`

// How the source's rows are written. srcInsertSQL inserts partition $1's
// $3 rows from id $2 (placeholders, which fill then sets with srcValues and
// srcNote); srcFixSQL sets partition $1 to generation $2 with the same
// expressions, so values depend on (id, gen) only, and srcLogSQL logs that
// correction in the same transaction.
const (
	srcValues    = `((id * 13 + gen * 7) % 100000) + 0.5`
	srcNote      = `'src row ' || id || ' gen ' || gen || ' it''s ünïcode ' || repeat('x', 40)`
	srcInsertSQL = `INSERT INTO src.rows (` + srcColumns + `)
SELECT id, $1::date, 0, '', 0 FROM generate_series($2::bigint, $2::bigint + $3::int - 1) AS id`
	srcFixSQL = `UPDATE src.rows SET gen = $2, amount = ((id * 13 + $2::int * 7) % 100000) + 0.5,
  note = 'src row ' || id || ' gen ' || $2::int || ' it''s ünïcode ' || repeat('x', 40)
 WHERE event_date = $1::date AND gen < $2`
	srcLogSQL = `INSERT INTO src.corrections (event_date, gen) VALUES ($1::date, $2) ON CONFLICT DO NOTHING`
)

// srcFix is one correction of the plan: partition p set to generation gen.
type srcFix struct {
	at    time.Duration
	p     int
	gen   int
	done  bool
	ackAt time.Time // when its COMMIT returned
	err   string
}

// srcItem is the next thing the source's publisher does.
type srcItem struct {
	at  time.Duration
	cp  *pubCopy
	fix *srcFix
}

// sourceDB is the source: two places, one the primary and the other its
// streaming standby, whose roles a promotion swaps; the plan of its
// events and corrections; what the fault did to it.
type sourceDB struct {
	places  [2]*localpg.Server
	cur     int           // the primary's place
	pool    *pgxpool.Pool // both places, target_session_attrs=read-write: always the primary
	urlFile string
	parts   int
	rows    []int // rows of each partition, fixed
	logf    func(string, ...any)

	events []*event // the fault phase's, then the settle events
	items  []srcItem
	fixes  []*srcFix

	mu       sync.Mutex
	fixFails int
	promotes int
	restarts int
	inFlight int           // copies found in flight on the node a fault hit
	held     time.Duration // how long faults held the standby's replay in all
}

// srcPartitions is how many partitions the source has.
func srcPartitions(o Options) int { return min(o.Partitions, 12) }

// startSource starts the source's primary, fills it, makes its standby,
// writes the multi-host URL idem reads to urlFile, and draws the source's
// workload from the seed.
func startSource(ctx context.Context, o Options) (*sourceDB, error) {
	s := &sourceDB{urlFile: filepath.Join(o.Dir, "source.url"), parts: srcPartitions(o), logf: o.Logf}
	p, err := localpg.Start(ctx, localpg.Options{Settings: sourceSettings})
	if err != nil {
		return nil, fmt.Errorf("chaos: start the source: %w", err)
	}
	s.places[0] = p
	if err := s.fill(ctx, rand.New(rand.NewPCG(uint64(o.Seed), 6))); err != nil {
		s.close()
		return nil, err
	}
	st, err := p.Standby(ctx, 0)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("chaos: the source's standby: %w", err)
	}
	s.places[1] = st
	if err := os.WriteFile(s.urlFile, []byte(s.url("prefer-standby")+"\n"), 0o600); err != nil {
		s.close()
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(s.url("read-write"))
	if err != nil {
		s.close()
		return nil, err
	}
	pcfg.MaxConns = 4
	if s.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		s.close()
		return nil, err
	}
	s.plan(o, rand.New(rand.NewPCG(uint64(o.Seed), 5)))
	o.Logf("chaos: source PostgreSQL on port %d, its standby on port %d, %d partitions", p.Port, st.Port, s.parts)
	return s, nil
}

// url is a connection string to the source database over both places.
func (s *sourceDB) url(attrs string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=%s&connect_timeout=5",
		s.places[0].Port, s.places[1].Port, url.PathEscape(srcDBName), attrs)
}

func (s *sourceDB) primary() *localpg.Server { return s.places[s.cur] }
func (s *sourceDB) standby() *localpg.Server { return s.places[1-s.cur] }

// fill creates the source database, its schema and every partition's rows
// at generation 0.
func (s *sourceDB) fill(ctx context.Context, rng *rand.Rand) error {
	admin, err := pgx.Connect(ctx, s.places[0].URL(""))
	if err != nil {
		return fmt.Errorf("chaos: connect to the source: %w", err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+srcDBName)
	admin.Close(ctx)
	if err != nil {
		return fmt.Errorf("chaos: create the source database: %w", err)
	}
	c, err := pgx.Connect(ctx, s.places[0].URL(srcDBName))
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, sourceSchemaSQL); err != nil {
		return fmt.Errorf("chaos: source schema: %w", err)
	}
	s.rows = make([]int, s.parts)
	for p := range s.parts {
		s.rows[p] = 800 + rng.IntN(400)
		if _, err := c.Exec(ctx, srcInsertSQL, partitionKey(p), rowBase(p), s.rows[p]); err != nil {
			return fmt.Errorf("chaos: source rows of %s: %w", partitionKey(p), err)
		}
	}
	// Generation 0's values, written by the same expressions as a correction's.
	_, err = c.Exec(ctx, `UPDATE src.rows SET amount = `+srcValues+`, note = `+srcNote)
	return err
}

// plan draws the source's events and corrections: a quarter as many events
// as the main plan, over the phase, each for a dataset and partition, 1 or
// 2 copies; before half of the replays a correction of the partition, whose
// event follows it at once or, half the time, 3.5 to 4.5 s later.
func (s *sourceDB) plan(o Options, rng *rand.Rand) {
	n := max(o.Events/4, 20)
	gen := make([]int, s.parts)
	seen := map[[2]int]bool{}
	for i := range n {
		at := o.Duration * time.Duration(i) / time.Duration(n)
		di, p := rng.IntN(len(srcDatasets)), rng.IntN(s.parts)
		d := srcDatasets[di]
		ev := &event{idx: srcIdxBase + i, dataset: d.name, partition: partitionKey(p), runID: fmt.Sprintf("src-%d-%06d", o.Seed, i),
			subject: "idem.ready." + d.name, replay: seen[[2]int{di, p}]}
		seen[[2]int{di, p}] = true
		ev.body = validBody(ev.dataset, ev.partition, ev.runID)
		ev.msgID = ev.dataset + ":" + ev.partition + ":" + ev.runID
		pubAt := at
		if ev.replay && rng.IntN(2) == 0 {
			gen[p]++
			f := &srcFix{at: at, p: p, gen: gen[p]}
			s.fixes = append(s.fixes, f)
			s.items = append(s.items, srcItem{at: at, fix: f})
			if rng.IntN(2) == 0 {
				// Published past max_replica_lag after the correction: a
				// load that reads a lagging standby must see it, or wait.
				pubAt = min(at+srcMaxLag+srcLagSlack+time.Duration(500+rng.IntN(1000))*time.Millisecond, o.Duration)
			}
		}
		for c := range 1 + rng.IntN(2) {
			cp := &pubCopy{ev: ev, n: c, at: pubAt, msgID: rng.IntN(2) == 0}
			if c > 0 {
				cp.at = min(pubAt+time.Duration(200+rng.IntN(4800))*time.Millisecond, o.Duration)
			}
			ev.copies = append(ev.copies, cp)
			s.items = append(s.items, srcItem{at: cp.at, cp: cp})
		}
		s.events = append(s.events, ev)
	}
	sort.SliceStable(s.items, func(a, b int) bool { return s.items[a].at < s.items[b].at })
}

// sourceYAML is the source datasets' config, or "" without Options.PGSource.
func sourceYAML(o Options) string {
	if !o.PGSource {
		return ""
	}
	var b strings.Builder
	for _, d := range srcDatasets {
		fmt.Fprintf(&b, "  %s:\n    strategy: %s\n    target: %s\n%s", d.name, d.strategy, d.target, d.yaml)
		fmt.Fprintf(&b, "    source:\n      postgres:\n        url_file: %s\n        sql: %s\n        max_replica_lag: %s\n",
			filepath.Join(o.Dir, "source.url"), srcQuery, srcMaxLag)
		fmt.Fprintf(&b, "    retry_delay: %s\n    max_retry_delay: %s\n    timeout: 20s\n", RetryDelay, MaxRetryDelay)
	}
	return b.String()
}

// sourceTargetsSQL creates the source datasets' targets in the warehouse.
const sourceTargetsSQL = `
CREATE TABLE analytics.src_replace (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, gen int);
CREATE INDEX ON analytics.src_replace (event_date);
CREATE TABLE analytics.src_raw (id bigint, event_date date, amount numeric(12,2), note text, gen int, run_id text, load_seq bigint);
`

// publish carries the source's plan out beside the main publisher:
// corrections on the source's primary, then the events, through pub. The
// channel closes when it is done; without a source, at once.
func (s *sourceDB) publish(ctx context.Context, start time.Time, pub *publisher) <-chan struct{} {
	done := make(chan struct{})
	if s == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		for _, it := range s.items {
			if d := time.Until(start.Add(it.at)); d > 0 {
				sleepCtx(ctx, d)
			}
			if ctx.Err() != nil {
				return
			}
			if it.fix != nil {
				s.correct(ctx, it.fix)
			} else {
				pub.publish(ctx, it.cp)
			}
		}
	}()
	return done
}

// correct applies f on the primary, retried for 10 s (a promotion, a
// restart of the primary's place): idempotent, as it only raises
// generations.
func (s *sourceDB) correct(ctx context.Context, f *srcFix) {
	deadline := time.Now().Add(10 * time.Second)
	for ctx.Err() == nil {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, srcFixSQL, partitionKey(f.p), f.gen); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, srcLogSQL, partitionKey(f.p), f.gen)
			return err
		})
		if err == nil {
			f.done, f.ackAt = true, time.Now()
			return
		}
		if time.Now().After(deadline) {
			f.err = err.Error()
			s.mu.Lock()
			s.fixFails++
			s.mu.Unlock()
			return
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// settle waits until the standby has replayed everything the primary has
// written (so the settle loads read the source's final content, whichever
// node they read), then returns one event per (source dataset, partition)
// with run_id runID, indexed from idx. A standby that does not catch up
// within a minute is a violation.
func (s *sourceDB) settle(ctx context.Context, r *Report, idx int, runID string) []*event {
	if s == nil {
		return nil
	}
	if err := s.caughtUp(ctx, time.Minute); err != nil {
		r.violate("the source's standby did not catch up with its primary: %v", err)
	}
	var out []*event
	for _, d := range srcDatasets {
		for p := range s.parts {
			ev := &event{idx: idx + len(out), dataset: d.name, partition: partitionKey(p), settle: true, runID: runID,
				subject: "idem.ready." + d.name}
			ev.body = validBody(ev.dataset, ev.partition, ev.runID)
			ev.msgID = ev.dataset + ":" + ev.partition + ":" + ev.runID
			ev.copies = []*pubCopy{{ev: ev, msgID: true}}
			out = append(out, ev)
		}
	}
	return out
}

// phaseEvents are the source's events of the fault phase, for the history.
func (s *sourceDB) phaseEvents() []*event {
	if s == nil {
		return nil
	}
	return s.events
}

// caughtUp waits until the standby has replayed the primary's current WAL
// position.
func (s *sourceDB) caughtUp(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var lsn string
	if err := s.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return fmt.Errorf("the primary's WAL position: %w", err)
	}
	for {
		c, err := pgx.Connect(ctx, s.standby().URL(srcDBName))
		if err == nil {
			var ok bool
			err = c.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&ok)
			c.Close(context.WithoutCancel(ctx))
			if err == nil && ok {
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("replay short of %s: %v", lsn, err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

func (s *sourceDB) close() {
	if s == nil {
		return
	}
	if s.pool != nil {
		s.pool.Close()
	}
	for _, p := range s.places {
		if p != nil {
			_ = p.Close()
		}
	}
}

// SourceFigures are the PostgreSQL source's (Options.PGSource).
type SourceFigures struct {
	Partitions      int `json:"partitions"`
	Events          int `json:"events"`
	Corrections     int `json:"corrections"`      // applied on the source's primary
	CorrectionFails int `json:"correction_fails"` // given up after 10 s
	Promotions      int `json:"promotions"`
	Restarts        int `json:"standby_restarts"`
	// CopiesCut counts the copies from the source that were in flight on
	// the node a fault stopped or promoted, at that moment.
	CopiesInFlight int `json:"copies_in_flight_at_faults"`
	// ReplayHeldSeconds is how long the restarts held the standby's
	// replay back in all: time during which it lagged.
	ReplayHeldSeconds float64 `json:"replay_held_seconds"`
	// LagWaits counts the partitions of the source datasets whose last
	// event waited for the lagging standby (idem.source_waits), and
	// LagChecks how often that wait was checked: the gate held loads.
	LagWaits  int `json:"lag_waits"`
	LagChecks int `json:"lag_checks"`
	// LagAttempts counts the attempts that spent the message's budget
	// (failed transient) because the standby lagged: a lag found by the
	// copy's own gate is a wait too, so any is a violation.
	LagAttempts int `json:"lag_attempts"`
	// LoadsChecked counts src_append's loads read whole from its raw
	// table, and src_replace's successes read from the audit; Partial,
	// Torn and Stale those that were not one complete, fresh enough
	// snapshot of their partition.
	LoadsChecked int `json:"loads_checked"`
	Partial      int `json:"partial_loads"`
	Torn         int `json:"torn_loads"`
	Stale        int `json:"stale_loads"`
	// LostCorrections are corrections a promotion did not keep (acked on
	// the old primary, missing on the new one): the source's final content
	// is the reference all the same.
	LostCorrections int  `json:"lost_corrections"`
	TablesEqual     bool `json:"tables_equal_source"`
}

// srcLoad is one load of a source dataset as the checker reads it: the
// partition, when its attempt started, how many rows and distinct ids it
// wrote, and the lowest and highest generation among them (src_append);
// or the rows it inserted and deleted and what the previous load of the
// partition had inserted (src_replace, from the audit: no generations).
type srcLoad struct {
	dataset, runID string
	p              int
	started        time.Time
	rows, ids      int
	minGen, maxGen int
	noGens         bool
	deleted, prev  int
}

// judgeLoads holds each load to one complete snapshot of its partition
// (want[p] rows, each id once, one generation) that is fresh enough: it
// saw every correction whose COMMIT returned more than srcMaxLag (plus
// srcLagSlack) before the attempt started, as max_replica_lag promises.
// acked maps a partition to its corrections' generations and times, those
// that survived in the source. It returns the violations.
func judgeLoads(loads []srcLoad, want []int, acked map[int][]srcFix, f *SourceFigures) []string {
	var out []string
	for _, l := range loads {
		f.LoadsChecked++
		what := fmt.Sprintf("%s %s run %s (started %s)", l.dataset, partitionKey(l.p), l.runID, l.started.Format("15:04:05.000"))
		if l.rows != want[l.p] || l.ids != want[l.p] {
			f.Partial++
			out = append(out, fmt.Sprintf("%s loaded %d rows (%d ids) of the partition's %d: not the whole partition once",
				what, l.rows, l.ids, want[l.p]))
			continue
		}
		if l.noGens {
			if l.deleted != l.prev {
				f.Torn++
				out = append(out, fmt.Sprintf("%s deleted %d rows where the previous load had inserted %d: two loads overlapped",
					what, l.deleted, l.prev))
			}
			continue
		}
		if l.minGen != l.maxGen {
			f.Torn++
			out = append(out, fmt.Sprintf("%s mixed generations %d to %d: not one snapshot", what, l.minGen, l.maxGen))
			continue
		}
		need := 0
		for _, c := range acked[l.p] {
			if c.ackAt.Before(l.started.Add(-srcMaxLag-srcLagSlack)) && c.gen > need {
				need = c.gen
			}
		}
		if l.minGen < need {
			f.Stale++
			out = append(out, fmt.Sprintf("%s read generation %d, but generation %d was committed more than max_replica_lag (%s) before it started",
				what, l.minGen, need, srcMaxLag))
		}
	}
	return out
}

// check holds the source datasets to the source: each visible table
// equals the source's final content row for row, each load was one whole,
// fresh enough snapshot (judgeLoads), and delete_insert's chain holds.
func (s *sourceDB) check(ctx context.Context, db querier, r *Report) error {
	if s == nil {
		return nil
	}
	f := &SourceFigures{Partitions: s.parts, Events: len(s.events), Promotions: s.promotes, Restarts: s.restarts,
		CopiesInFlight: s.inFlight, CorrectionFails: s.fixFails, ReplayHeldSeconds: s.held.Seconds(), TablesEqual: true}
	r.Source = f
	for _, d := range srcDatasets {
		r.Datasets = append(r.Datasets, d.name+"("+d.strategy+", postgres source)")
	}
	for _, x := range s.fixes {
		if x.done {
			f.Corrections++
		}
	}
	want := map[int64]string{}
	rows, err := s.pool.Query(ctx, `SELECT id, concat_ws('|', event_date, amount, note, gen) FROM src.rows`)
	if err != nil {
		return fmt.Errorf("chaos: read the source: %w", err)
	}
	for rows.Next() {
		var id int64
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			return err
		}
		want[id] = v
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, d := range srcDatasets {
		got := map[int64][]string{}
		rows, err := db.Query(ctx, `SELECT id, concat_ws('|', event_date, amount, note, gen) FROM `+d.visible)
		if err != nil {
			return fmt.Errorf("chaos: read %s: %w", d.visible, err)
		}
		for rows.Next() {
			var id int64
			var v string
			if err := rows.Scan(&id, &v); err != nil {
				return err
			}
			got[id] = append(got[id], v)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var lost, stale, unexpected, doubled int
		for id, v := range want {
			switch g := got[id]; {
			case len(g) == 0:
				lost++
			case g[0] != v:
				stale++
			}
		}
		for id, g := range got {
			if _, ok := want[id]; !ok {
				unexpected++
			}
			doubled += len(g) - 1
		}
		c := &r.Check
		c.LostRows += lost
		c.StaleRows += stale
		c.UnexpectedRows += unexpected
		c.DoubledRows += doubled
		if lost+stale+unexpected+doubled > 0 {
			f.TablesEqual, c.TablesEqualReference = false, false
			r.violate("%s: %s differs from the source's final content: lost %d, stale %d, unexpected %d, doubled %d rows",
				d.name, d.visible, lost, stale, unexpected, doubled)
		}
	}
	// The corrections the source kept, with when their COMMIT returned.
	kept := map[[2]int]bool{}
	rows, err = s.pool.Query(ctx, `SELECT event_date::text, gen FROM src.corrections`)
	if err != nil {
		return fmt.Errorf("chaos: read the source's corrections: %w", err)
	}
	for rows.Next() {
		var day string
		var gen int
		if err := rows.Scan(&day, &gen); err != nil {
			return err
		}
		if p, ok := partitionIndex(day); ok {
			kept[[2]int{p, gen}] = true
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	acked := map[int][]srcFix{}
	for _, x := range s.fixes {
		switch {
		case x.done && kept[[2]int{x.p, x.gen}]:
			acked[x.p] = append(acked[x.p], *x)
		case x.done:
			f.LostCorrections++
		}
	}
	if f.LostCorrections > 0 {
		r.note("%d source corrections acknowledged by the old primary were not kept by the promotion; the source's final content is the reference",
			f.LostCorrections)
	}
	if err := db.QueryRow(ctx, `SELECT count(*), coalesce(sum(checks), 0) FROM idem.source_waits
		WHERE dag_id = $1 AND task_id IN ('src_replace', 'src_append')`, pipeline).Scan(&f.LagWaits, &f.LagChecks); err != nil {
		return fmt.Errorf("chaos: read the source waits: %w", err)
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM idem.pipeline_audit
		WHERE dag_id = $1 AND task_id IN ('src_replace', 'src_append') AND status = 'failed' AND error_kind = 'transient' AND error LIKE '%lags behind its primary%'`,
		pipeline).Scan(&f.LagAttempts); err != nil {
		return fmt.Errorf("chaos: read the source attempts: %w", err)
	}
	if f.LagAttempts > 0 {
		r.violate("%d attempts of the source datasets spent the budget on a lagging standby: a lag is a wait", f.LagAttempts)
	}
	loads, err := s.readLoads(ctx, db)
	if err != nil {
		return err
	}
	for _, v := range judgeLoads(loads, s.rows, acked, f) {
		r.violate("%s", v)
	}
	return nil
}

// readLoads reads every load of the source datasets: src_append's from its
// raw table (its rows, whole), src_replace's from the audit (the rows it
// inserted and deleted; it must delete what the previous load inserted).
func (s *sourceDB) readLoads(ctx context.Context, db querier) ([]srcLoad, error) {
	var out []srcLoad
	rows, err := db.Query(ctx, `
SELECT a.partition_key, a.run_id, a.started_at, count(r.id), count(DISTINCT r.id), coalesce(min(r.gen), -1), coalesce(max(r.gen), -1)
  FROM idem.pipeline_audit a
  LEFT JOIN analytics.src_raw r ON r.event_date = a.partition_key::date AND r.run_id = a.run_id
 WHERE a.dag_id = $1 AND a.task_id = 'src_append' AND a.status = 'success'
 GROUP BY a.id, a.partition_key, a.run_id, a.started_at`, pipeline)
	if err != nil {
		return nil, fmt.Errorf("chaos: read src_append's loads: %w", err)
	}
	for rows.Next() {
		var l srcLoad
		var day string
		if err := rows.Scan(&day, &l.runID, &l.started, &l.rows, &l.ids, &l.minGen, &l.maxGen); err != nil {
			return nil, err
		}
		l.dataset = "src_append"
		var ok bool
		if l.p, ok = partitionIndex(day); !ok {
			return nil, fmt.Errorf("chaos: src_append loaded partition %q, which the source does not have", day)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// src_replace: the target keeps only the last load, so each success is
	// read from the audit: whole (it inserted the partition's rows) and
	// alone (it deleted what the previous success inserted).
	rows, err = db.Query(ctx, `
SELECT partition_key, run_id, started_at, coalesce(rows_inserted, -1), coalesce(rows_deleted, -1),
       coalesce(lag(rows_inserted) OVER (PARTITION BY partition_key ORDER BY finished_at, id), 0)
  FROM idem.pipeline_audit
 WHERE dag_id = $1 AND task_id = 'src_replace' AND status = 'success'`, pipeline)
	if err != nil {
		return nil, fmt.Errorf("chaos: read src_replace's loads: %w", err)
	}
	for rows.Next() {
		var day, run string
		var started time.Time
		var ins, del, prev int
		if err := rows.Scan(&day, &run, &started, &ins, &del, &prev); err != nil {
			return nil, err
		}
		p, ok := partitionIndex(day)
		if !ok {
			return nil, fmt.Errorf("chaos: src_replace loaded partition %q, which the source does not have", day)
		}
		out = append(out, srcLoad{dataset: "src_replace", runID: run, p: p, started: started, rows: ins, ids: ins,
			noGens: true, deleted: del, prev: prev})
	}
	return out, rows.Err()
}

// partitionIndex is the partition whose key is day.
func partitionIndex(day string) (int, bool) {
	t, err := time.Parse(time.DateOnly, day)
	if err != nil || t.Before(firstDay) {
		return 0, false
	}
	return int(t.Sub(firstDay) / (24 * time.Hour)), true
}
