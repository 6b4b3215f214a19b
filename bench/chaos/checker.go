package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
)

// The checker trusts nothing idem says about itself: it reads staging and
// the targets with plain SQL, the ledger and audit rows as data, and the
// dead-letter stream message by message, and compares them with what the
// publisher recorded. Header names are spelled out rather than imported, so
// a renamed header fails here too.
const (
	dlqStream       = "IDEM_DLQ"
	eventsStream    = "IDEM_EVENTS"
	advisoryStream  = "IDEM_EVENTS_ADVISORIES"
	durableConsumer = "idem"
	pipeline        = "chaos"
)

// querier is what the checker reads through: the pool, or in tests a
// transaction that is rolled back.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// history is everything the campaign recorded, for the checker.
type history struct {
	events []*event // fault phase, then settle
	faults []*fault
	exits  []exit
	// pauses are when each operator's pause of pausedDataset returned: a
	// message of that dataset delivered during one goes back for later, a
	// redelivery no fault explains.
	pauses []time.Time
}

// window is a span during which a fault could have disturbed a delivery.
type window struct {
	kind       string
	start, end time.Time
}

// faultWindows are the faults' spans, each stretched by the ack wait (a
// message held by a killed process comes back only after it) and a margin.
// Outages are stretched further: after NATS comes back, a replica
// reconnects within its reconnect wait (2 s plus up to 2 s of jitter) before
// its messages are redelivered.
func faultWindows(h history, ackWait time.Duration) []window {
	var out []window
	for _, f := range h.faults {
		if f.Skipped != "" {
			continue
		}
		tail := ackWait + 2*time.Second
		if isOutage(f.Kind) {
			tail = ackWait + 10*time.Second
		}
		out = append(out, window{f.Kind, f.Start, f.End.Add(tail)})
		if f.Kind == FaultFailover && !f.Killed.IsZero() && !f.Promoted.IsZero() {
			// The kill ends the loads in flight (the failover's own window);
			// once they have failed, the rest is an outage.
			out = append(out, window{failoverOutage, f.Killed.Add(failoverKillMargin), f.Promoted.Add(ackWait + 10*time.Second)})
		}
	}
	for _, e := range h.exits {
		if e.Crashed {
			out = append(out, window{FaultCrashCommit, e.At.Add(-time.Second), e.At.Add(ackWait + 2*time.Second)})
		}
	}
	return out
}

// explained reports whether a fault of one of kinds overlapped [from, to].
func explained(ws []window, from, to time.Time, kinds ...string) bool {
	return overlapping(ws, from, to, kinds...) != ""
}

// overlapping names the kind of the first fault of one of kinds (any kind
// when none is given) that overlapped [from, to]; "" when none did.
func overlapping(ws []window, from, to time.Time, kinds ...string) string {
	for _, w := range ws {
		if w.start.After(to) || w.end.Before(from) {
			continue
		}
		if len(kinds) == 0 || slices.Contains(kinds, w.kind) {
			return w.kind
		}
	}
	return ""
}

// Which faults may excuse what. A valid event must never be dead-lettered
// because the warehouse or NATS went away or because of a deploy
// (outageFaults): idem holds its messages through those without spending
// their budget. A load that ran and was cut short by a fault does spend
// one attempt of its message's budget (attemptFaults), so enough of them
// can exhaust a message: those dead letters are excused, unless the message
// was dead-lettered during an outage. doc.go gives the reasoning.
var (
	// outageFaults: PostgreSQL stopped (fast: sessions get 57P01, then
	// connections are refused) or its sessions terminated (57P01), no
	// server taking writes at idem's address between a failover's kill and
	// its promotion, NATS stopped, replicas restarted with SIGTERM.
	// In a cluster, every fault of NATS or of the links to it is one too:
	// none of them runs a load, so none may spend a message's budget.
	outageFaults = append([]string{FaultWarehouseDown, FaultPGFast, FaultPGTerminate, failoverOutage, FaultNATSDown, FaultNATSRestart,
		FaultRollingRestart, FaultJSStorageFull, FaultSiteCrash, FaultPGDiskFull}, natsClusterFaults...)
	// attemptFaults end a load that ran: the process dies in it (kill,
	// crash_commit), stops in it past the ack wait (pause), or its
	// connection is lost mid-load (a server crash, a failover's SIGKILL of
	// the primary, a reset, a timeout, the pooler restarted: each cuts the
	// connection without a word, so only the next connect tells idem
	// whether the warehouse is gone). A full disk's PANIC (pg_disk_full)
	// is such a server crash.
	attemptFaults = []string{FaultKill, FaultCrashCommit, FaultPause, FaultPGImmediate, FaultFailover, FaultResetPeer, FaultTimeout,
		FaultPoolerRestart, FaultSourceFailover, FaultPGDiskFull}
	// diedFaults are the attemptFaults that leave an attempt without a
	// verdict, which a "crashed" dead letter reports.
	diedFaults = []string{FaultKill, FaultCrashCommit, FaultPause}
	// redeliveryFaults can make JetStream deliver a message again without
	// any failure: its process died or stopped, its ack was lost, or a
	// shutdown handed it back.
	redeliveryFaults = append([]string{FaultKill, FaultCrashCommit, FaultPause, FaultNATSRestart, FaultNATSDown, FaultRollingRestart, FaultJSStorageFull, FaultSiteCrash},
		natsClusterFaults...)
	// natsClusterFaults lose acks and pulls in flight, or hand a consumer
	// to a new leader: they redeliver without any failure of idem's.
	natsClusterFaults = []string{FaultLeaderKill, FaultFollowerKill, FaultNodeDown, FaultPartition, FaultNATSRolling,
		FaultNATSLatency, FaultNATSReset, FaultNATSBlackhole}
)

func isOutage(kind string) bool { return slices.Contains(outageFaults, kind) }

// verdict is the checker's judgement of a valid event's exhausted or
// crashed dead letter.
type verdict int

const (
	unexplained verdict = iota // no fault that ends loads overlapped its life
	excused                    // faults that end loads spent its attempts
	inOutage                   // dead-lettered during an outage or a deploy
)

// judgeTransient judges the dead letter dl of a valid event first sent at
// sentAt, and names the fault behind the verdict. An outage around the
// moment of the dead letter decides, whatever happened before: the outage
// took the message's last attempt, and idem must hold messages through
// outages instead. Otherwise a fault that ends loads during the message's
// life excuses it: for a crashed dead letter (its last attempt died) one
// that kills or stops the process, for an exhausted one any.
func judgeTransient(ws []window, sentAt time.Time, dl deadLetter) (verdict, string) {
	if k := overlapping(ws, dl.failedAt, dl.failedAt, outageFaults...); k != "" {
		return inOutage, k
	}
	if k := siteCrashedDeadLetter(ws, sentAt, dl); k != "" {
		return inOutage, k
	}
	kinds := attemptFaults
	if dl.kind == "crashed" {
		kinds = diedFaults
	}
	if k := overlapping(ws, sentAt, dl.failedAt, kinds...); k != "" {
		return excused, k
	}
	return unexplained, ""
}

// deadLetter is one message of the dead-letter stream, as the checker reads it.
type deadLetter struct {
	seq        uint64
	subject    string
	chaosID    string
	kind       string
	err        string
	deliveries string
	origSeq    string
	failedAt   time.Time
}

func readDeadLetters(ctx context.Context, js jetstream.JetStream) ([]deadLetter, error) {
	var out []deadLetter
	err := eachMsg(ctx, js, dlqStream, func(m *jetstream.RawStreamMsg) error {
		at, _ := time.Parse(time.RFC3339Nano, m.Header.Get("Idem-Failed-At"))
		out = append(out, deadLetter{
			seq: m.Sequence, subject: m.Subject, chaosID: m.Header.Get(chaosIDHeader),
			kind: m.Header.Get("Idem-Error-Kind"), err: m.Header.Get("Idem-Error"),
			deliveries: m.Header.Get("Idem-Deliveries"), origSeq: m.Header.Get("Idem-Original-Seq"), failedAt: at,
		})
		return nil
	})
	return out, err
}

// eachMsg calls fn for every message of stream, oldest first, read one by
// one; a missing stream has none.
func eachMsg(ctx context.Context, js jetstream.JetStream, stream string, fn func(m *jetstream.RawStreamMsg) error) error {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("chaos: read message %d of %s: %w", seq, stream, err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// parseChaosID splits "e<idx>.<copy>".
func parseChaosID(s string) (idx, copyN int, ok bool) {
	a, b, found := strings.Cut(strings.TrimPrefix(s, "e"), ".")
	if !found || !strings.HasPrefix(s, "e") {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	c, err2 := strconv.Atoi(b)
	return i, c, err1 == nil && err2 == nil
}

// checkTables compares every dataset's visible rows with staging, and
// append_dedupe's physical rows with the ledger.
func checkTables(ctx context.Context, db querier, r *Report) error {
	c := &r.Check
	c.TablesEqualReference = true
	for _, d := range datasets {
		var want, got string
		if err := db.QueryRow(ctx, checksumSQL("SELECT "+columns+" FROM "+d.staging)).Scan(&want); err != nil {
			return fmt.Errorf("chaos: checksum %s: %w", d.staging, err)
		}
		if err := db.QueryRow(ctx, checksumSQL("SELECT "+columns+" FROM "+d.visible)).Scan(&got); err != nil {
			return fmt.Errorf("chaos: checksum %s: %w", d.visible, err)
		}
		var lost, stale, unexpected, doubled int
		err := db.QueryRow(ctx, `
WITH s AS (SELECT `+columns+` FROM `+d.staging+`),
     t AS (SELECT `+columns+` FROM `+d.visible+`)
SELECT (SELECT count(*) FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.id = s.id)),
       (SELECT count(*) FROM s WHERE EXISTS (SELECT 1 FROM t WHERE t.id = s.id)
           AND NOT EXISTS (SELECT 1 FROM t WHERE t.id = s.id
               AND (t.event_date, t.amount, t.note, t.version) IS NOT DISTINCT FROM (s.event_date, s.amount, s.note, s.version))),
       (SELECT count(*) FROM t WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = t.id)),
       (SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM t GROUP BY id HAVING count(*) > 1) x)`).
			Scan(&lost, &stale, &unexpected, &doubled)
		if err != nil {
			return fmt.Errorf("chaos: compare %s with %s: %w", d.visible, d.staging, err)
		}
		c.LostRows += lost
		c.StaleRows += stale
		c.UnexpectedRows += unexpected
		c.DoubledRows += doubled
		if want != got {
			c.TablesEqualReference = false
			r.violate("%s: %s has checksum %s, staging (the reference) %s: lost %d, stale %d, unexpected %d, doubled %d",
				d.name, d.visible, got, want, lost, stale, unexpected, doubled)
		}
	}
	var inLoad, twice, noRows, noLoad int
	err := db.QueryRow(ctx, `
SELECT (SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM analytics.append_raw GROUP BY id, load_seq HAVING count(*) > 1) x),
       (SELECT count(*) FROM (SELECT 1 FROM analytics.append_raw GROUP BY event_date, run_id HAVING count(DISTINCT load_seq) > 1) x),
       (SELECT count(*) FROM idem.run_ledger l WHERE l.dag_id = $1 AND l.task_id = 'append'
           AND NOT EXISTS (SELECT 1 FROM analytics.append_raw a WHERE a.event_date = l.partition_key::date AND a.run_id = l.run_id)),
       (SELECT count(*) FROM (SELECT DISTINCT event_date, run_id FROM analytics.append_raw) a
           WHERE NOT EXISTS (SELECT 1 FROM idem.run_ledger l WHERE l.dag_id = $1 AND l.task_id = 'append'
               AND l.partition_key = a.event_date::text AND l.run_id = a.run_id))`, pipeline).
		Scan(&inLoad, &twice, &noRows, &noLoad)
	if err != nil {
		return fmt.Errorf("chaos: check append_raw: %w", err)
	}
	c.DoubledRows += inLoad
	c.RunsLoadedTwice += twice
	c.LoadsWithoutRows += noRows
	c.RowsWithoutLoad += noLoad
	for _, v := range []struct {
		n    int
		what string
	}{
		{c.LostRows, "rows lost"}, {c.StaleRows, "rows stale"}, {c.UnexpectedRows, "unexpected rows"},
		{c.DoubledRows, "rows doubled"}, {twice, "append runs loaded twice (two load_seq for one run_id)"},
		{noRows, "append ledger successes without rows"}, {noLoad, "append runs with rows but no ledger success"},
	} {
		if v.n > 0 {
			r.violate("%d %s", v.n, v.what)
		}
	}
	return nil
}

// checkChains reads the audit as a history: delete_insert loads of one
// partition are serialized by the partition lock, so each committed load
// must have deleted exactly the rows the previous one inserted. A load that
// ran concurrently with another deletes the older rows instead, and its
// doubling stays visible here even after a later load repaired the table.
func checkChains(ctx context.Context, db querier, r *Report) error {
	rows, err := db.Query(ctx, `
SELECT task_id, partition_key, run_id, rows_deleted, coalesce(prev, 0) FROM (
  SELECT task_id, partition_key, run_id, rows_deleted,
         lag(rows_inserted) OVER (PARTITION BY task_id, partition_key ORDER BY finished_at, id) AS prev
    FROM idem.pipeline_audit
   WHERE dag_id = $1 AND status = 'success' AND task_id IN ('replace', 'replace_part')) h
 WHERE rows_deleted IS NOT NULL AND rows_deleted <> coalesce(prev, 0)`, pipeline)
	if err != nil {
		return fmt.Errorf("chaos: read load history: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ds, part, run string
		var deleted, prev int64
		if err := rows.Scan(&ds, &part, &run, &deleted, &prev); err != nil {
			return err
		}
		r.Check.ChainBreaks++
		if r.Check.ChainBreaks <= 10 {
			r.violate("%s %s run %s deleted %d rows where the previous load had inserted %d: two loads overlapped", ds, part, run, deleted, prev)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if r.Check.ChainBreaks > 10 {
		r.violate("... %d load-history breaks in all", r.Check.ChainBreaks)
	}
	return nil
}

// doubledNowSQL counts the rows a reader would see twice right now.
const doubledNowSQL = `
SELECT (SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM analytics.replace GROUP BY id HAVING count(*) > 1) a)
     + (SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM analytics.replace_part GROUP BY id HAVING count(*) > 1) b)
     + (SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM analytics.append_latest GROUP BY event_date, id HAVING count(*) > 1) c)`

// reader samples the targets while the campaign runs, as an analyst's
// queries would: no committed state may show a row twice, even one a later
// load repairs.
type reader struct {
	samples, bad int
	worst        int64
	firstBad     time.Time
}

func (rd *reader) run(ctx context.Context, db querier, every time.Duration) {
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var n int64
		err := db.QueryRow(qctx, doubledNowSQL).Scan(&n)
		cancel()
		if err == nil { // the database may be down: a fault, not a finding
			rd.samples++
			if n > 0 {
				if rd.bad == 0 {
					rd.firstBad = time.Now()
				}
				rd.bad++
				rd.worst = max(rd.worst, n)
			}
		}
		sleepCtx(ctx, every)
	}
}

func checksumSQL(q string) string {
	return "SELECT coalesce(md5(string_agg(r::text, E'\\n' ORDER BY r::text)), 'empty') || ':' || count(*) FROM (" + q + ") r"
}

// checkRuns matches the ledger, the audit and the dead-letter stream with
// the published events.
func checkRuns(ctx context.Context, db querier, js jetstream.JetStream, h history, ackWait time.Duration, r *Report) error {
	c := &r.Check
	type ledgerRow struct{ loads int }
	ledger := map[runKey]ledgerRow{}
	rows, err := db.Query(ctx, `SELECT task_id, partition_key, run_id, loads FROM idem.run_ledger WHERE dag_id = $1`, pipeline)
	if err != nil {
		return fmt.Errorf("chaos: read ledger: %w", err)
	}
	for rows.Next() {
		var k runKey
		var l ledgerRow
		if err := rows.Scan(&k.dataset, &k.partition, &k.runID, &l.loads); err != nil {
			return err
		}
		ledger[k] = l
	}
	if err := rows.Err(); err != nil {
		return err
	}
	success := map[runKey]int{}
	rows, err = db.Query(ctx, `SELECT task_id, partition_key, run_id, count(*) FROM idem.pipeline_audit
		WHERE dag_id = $1 AND status = 'success' GROUP BY 1, 2, 3`, pipeline)
	if err != nil {
		return fmt.Errorf("chaos: read audit: %w", err)
	}
	for rows.Next() {
		var k runKey
		var n int
		if err := rows.Scan(&k.dataset, &k.partition, &k.runID, &n); err != nil {
			return err
		}
		success[k] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	r.Audit = map[string]int{}
	rows, err = db.Query(ctx, `SELECT status || coalesce('/' || error_kind, ''), count(*) FROM idem.pipeline_audit
		WHERE dag_id = $1 GROUP BY 1`, pipeline)
	if err != nil {
		return fmt.Errorf("chaos: read audit: %w", err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return err
		}
		r.Audit[s] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}

	if err := countCrashesAfterSuccess(ctx, db, h, r); err != nil {
		return err
	}
	dls, err := readDeadLetters(ctx, js)
	if err != nil {
		return err
	}
	byIdx := map[int]*event{}
	for _, ev := range h.events {
		byIdx[ev.idx] = ev
	}
	dlOf := map[int][]deadLetter{} // event index -> its dead letters
	sentAt := map[string]time.Time{}
	for _, ev := range h.events {
		for _, cp := range ev.copies {
			sentAt[cp.chaosID()] = cp.sentAt
		}
	}
	ws, pws := faultWindows(h, ackWait), pauseWindows(h.pauses, ackWait)
	deadValid := map[int]bool{} // valid events with a dead letter
	evidenceLeft := 10          // violations that quote the audit rows
	for _, dl := range dls {
		if isFileSubject(dl.subject) {
			continue // a watch's event: checkFiles judges it
		}
		idx, _, ok := parseChaosID(dl.chaosID)
		ev := byIdx[idx]
		if !ok || ev == nil {
			c.UnknownDeadLetters++
			r.violate("dead letter %d (%s) names no published copy: Chaos-Id %q", dl.seq, dl.subject, dl.chaosID)
			continue
		}
		dlOf[idx] = append(dlOf[idx], dl)
		if ev.fatal != "" {
			continue
		}
		deadValid[idx] = true
		if dl.kind == "fatal" {
			c.ValidJudgedFatal++
			r.violate("valid event %s %s %s dead-lettered as fatal: %s", ev.dataset, ev.partition, ev.runID, dl.err)
			continue
		}
		c.TransientDeadLtrs++
		what := fmt.Sprintf("valid event %s %s %s (%s, stream seq %s) dead-lettered %s after %s deliveries at %s",
			ev.dataset, ev.partition, ev.runID, dl.chaosID, dl.origSeq, dl.kind, dl.deliveries, dl.failedAt.Format("15:04:05.000"))
		switch v, by := judgeTransient(ws, sentAt[dl.chaosID], dl); v {
		case excused:
			c.TransientExplained++
			r.note("%s, excused by %s, a fault that ends loads: %s", what, by, cut(dl.err, 160))
		case inOutage:
			c.ValidDeadLetteredInOutage++
			r.violate("%s, during %s: an outage or a deploy dead-lettered a valid event: %s%s",
				what, by, cut(dl.err, 160), evidence(ctx, db, ev, &evidenceLeft))
		default:
			r.violate("%s with no fault to explain it: %s%s", what, cut(dl.err, 160), evidence(ctx, db, ev, &evidenceLeft))
		}
	}
	c.ValidEventsDeadLettered = len(deadValid)

	// The runs a failover took back: each must be in the final ledger, as
	// every valid event's; the figure says how many the failovers tested.
	lostBy := map[runKey]*fault{}
	for _, f := range h.faults {
		for _, k := range f.lost {
			lostBy[k] = f
			if _, ok := ledger[k]; ok {
				r.Faults.FailoverLostInLedger++
			}
		}
	}
	published := map[runKey]bool{}
	for _, ev := range h.events {
		acked := false
		for _, cp := range ev.copies {
			acked = acked || cp.acked
		}
		if !acked {
			r.violate("event %d (%s %s %s) was never stored: the publisher gave up", ev.idx, ev.dataset, ev.partition, ev.runID)
			continue
		}
		if ev.fatal != "" {
			checkFatal(ev, dlOf[ev.idx], ws, pws, success, r)
			continue
		}
		k := ev.key()
		published[k] = true
		c.ValidEvents++
		n, l := success[k], ledger[k]
		_, inLedger := ledger[k]
		switch {
		case n == 1 && inLedger:
			c.SucceededOnce++
			if l.loads != 1 {
				c.LedgerForced++
				r.violate("ledger says %s %s %s was loaded %d times without force", k.dataset, k.partition, k.runID, l.loads)
			}
		case n > 1:
			c.SuccessNotOne++
			r.violate("%s %s %s has %d successes in the audit: loaded more than once", k.dataset, k.partition, k.runID, n)
		case n == 1 || inLedger:
			c.SuccessNotOne++
			r.violate("%s %s %s: audit successes %d, in ledger %v: they must agree", k.dataset, k.partition, k.runID, n, inLedger)
		case len(dlOf[ev.idx]) > 0:
			c.ValidDeadLettered++
		default:
			c.UnaccountedEvents++
			lost := ""
			if f := lostBy[k]; f != nil {
				lost = fmt.Sprintf("; its load was acknowledged and lost by the failover at %s%s", f.Killed.Format("15:04:05.000"),
					loadedOver(ctx, db, ev, f))
			}
			r.violate("%s %s %s was published (seq %s) but neither loaded nor dead-lettered%s%s", k.dataset, k.partition, k.runID, seqs(ev),
				lost, evidence(ctx, db, ev, &evidenceLeft))
		}
	}
	for k := range ledger {
		if !published[k] && k.dataset != downstreamDataset && !isFileDataset(k.dataset) && !isTimelyDataset(k.dataset) { // checkDownstream checks those
			c.UnexpectedLedger++
			r.violate("ledger has %s %s %s, which was never published as a valid event", k.dataset, k.partition, k.runID)
		}
	}
	c.DLQCorrect = c.FatalMissing+c.FatalDuplicated+c.FatalWrongReason+c.UnknownDeadLetters+c.ValidJudgedFatal == 0 &&
		c.FatalRedelivered == c.FatalRedeliveredExpl && c.TransientDeadLtrs == c.TransientExplained && c.FatalLoaded == 0
	return nil
}

// loadedOver names the success on ev's partition, of a message later in
// the stream than every copy of ev, that came last before ev's first skip
// after failover f: the load re-verification would not load over. It says
// whether that load survived the failover (it had committed before ev's
// lost one, out of stream order) or ran on the new primary.
func loadedOver(ctx context.Context, db querier, ev *event, f *fault) string {
	var last uint64
	for _, cp := range ev.copies {
		if cp.acked {
			last = max(last, cp.seq)
		}
	}
	var run string
	var seq int64
	var at time.Time
	err := db.QueryRow(ctx, `
SELECT run_id, stream_seq, finished_at FROM idem.pipeline_audit
 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND status = 'success' AND stream_seq > $4
   AND finished_at < (SELECT min(finished_at) FROM idem.pipeline_audit
                       WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND run_id = $5
                         AND status = 'skipped' AND finished_at > $6)
 ORDER BY finished_at DESC LIMIT 1`, pipeline, ev.dataset, ev.partition, int64(last), ev.runID, f.Promoted).Scan(&run, &seq, &at)
	if err != nil {
		return ""
	}
	when := "survived the failover"
	if at.After(f.Promoted) {
		when = "loaded on the new primary"
	}
	return fmt.Sprintf("; skipped after a later event of the partition, %s (seq %d, finished %s), which %s",
		run, seq, at.Format("15:04:05.000"), when)
}

// evidence renders the audit rows of ev's run, every copy, for a violation:
// what each attempt was, when, and how it ended. It spends one of *left, so
// a campaign with many violations does not query for each.
func evidence(ctx context.Context, db querier, ev *event, left *int) string {
	if *left <= 0 {
		return ""
	}
	*left--
	rows, err := db.Query(ctx, `
SELECT coalesce(stream_seq, 0), attempt, status || coalesce('/' || error_kind, ''), started_at, finished_at, coalesce(left(error, 100), '')
  FROM idem.pipeline_audit
 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND run_id = $4
 ORDER BY id`, pipeline, ev.dataset, ev.partition, ev.runID)
	if err != nil {
		return "; audit rows: " + err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var seq int64
		var attempt int
		var status, msg string
		var started time.Time
		var finished *time.Time
		if err := rows.Scan(&seq, &attempt, &status, &started, &finished, &msg); err != nil {
			return "; audit rows: " + err.Error()
		}
		end := "-"
		if finished != nil {
			end = finished.Format("15:04:05.000")
		}
		p := fmt.Sprintf("seq %d attempt %d %s %s..%s", seq, attempt, status, started.Format("15:04:05.000"), end)
		if msg != "" {
			p += " (" + msg + ")"
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return "; audit rows: " + err.Error()
	}
	if len(parts) == 0 {
		return "; no audit rows"
	}
	return "; audit rows: " + strings.Join(parts, "; ")
}

// countCrashesAfterSuccess counts crash-hook exits whose run had just
// committed a success (the audit row's finished_at within 10 s before the
// exit): the ambiguous window between COMMIT and the ack, exactly.
func countCrashesAfterSuccess(ctx context.Context, db querier, h history, r *Report) error {
	var runs []string
	var at []time.Time
	for _, e := range h.exits {
		if e.Crashed {
			runs, at = append(runs, e.CrashRun), append(at, e.At)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	return db.QueryRow(ctx, `SELECT count(*) FROM unnest($2::text[], $3::timestamptz[]) AS c(run_id, at)
		WHERE EXISTS (SELECT 1 FROM idem.pipeline_audit a WHERE a.dag_id = $1 AND a.run_id = c.run_id
			AND a.status = 'success' AND a.finished_at BETWEEN c.at - interval '10 seconds' AND c.at)`,
		pipeline, runs, at).Scan(&r.Faults.CrashAfterSuccess)
}

// pauseWindows are the spans in which an operator's pause of pausedDataset
// could have sent a message back for later: from a little before its
// command returned (its row's since) for pauseHold, and the ack wait and a
// fetch after, when the held message comes back.
func pauseWindows(pauses []time.Time, ackWait time.Duration) []window {
	out := make([]window, 0, len(pauses))
	for _, at := range pauses {
		out = append(out, window{"operator_pause", at.Add(-2 * time.Second), at.Add(pauseHold + ackWait + 2*time.Second)})
	}
	return out
}

// checkFatal judges a fatal input's dead letters. ws are the faults'
// windows, pws the pauses' (pauseWindows), which explain only a message of
// pausedDataset.
func checkFatal(ev *event, dls []deadLetter, ws, pws []window, success map[runKey]int, r *Report) {
	c := &r.Check
	c.FatalInputs++
	if success[ev.key()] > 0 {
		c.FatalLoaded++
		r.violate("fatal input %d (%s) has a success in the audit", ev.idx, ev.fatal)
	}
	switch len(dls) {
	case 0:
		c.FatalMissing++
		r.violate("fatal input %d (%s, seq %s) is not in the dead-letter stream", ev.idx, ev.fatal, seqs(ev))
		return
	case 1:
		c.FatalDeadLettered++
	default:
		c.FatalDuplicated++
		r.violate("fatal input %d (%s) is in the dead-letter stream %d times", ev.idx, ev.fatal, len(dls))
	}
	dl := dls[0]
	if dl.kind != "fatal" || !strings.Contains(dl.err, ev.want) {
		c.FatalWrongReason++
		r.violate("fatal input %d (%s) dead-lettered as %s with %q; want fatal with %q", ev.idx, ev.fatal, dl.kind, cut(dl.err, 160), ev.want)
	}
	// An event for a dataset no replica knows waits unknownDatasetGrace for
	// a rollout, redelivered meanwhile: more than one delivery is its due.
	if dl.deliveries != "1" && ev.fatal != "unknown_dataset" {
		c.FatalRedelivered++
		kinds := redeliveryFaults
		if ev.fatal == "empty_partition" {
			kinds = nil // it reaches the database: any fault can fail its first delivery
		}
		from := ev.copies[0].sentAt
		if explained(ws, from, dl.failedAt, kinds...) || (ev.dataset == pausedDataset && explained(pws, from, dl.failedAt)) {
			c.FatalRedeliveredExpl++
		} else {
			r.violate("fatal input %d (%s) dead-lettered after %s deliveries with no fault to explain it", ev.idx, ev.fatal, dl.deliveries)
		}
	}
}

func seqs(ev *event) string {
	var s []string
	for _, cp := range ev.copies {
		if cp.acked {
			s = append(s, strconv.FormatUint(cp.seq, 10))
		}
	}
	return strings.Join(s, ",")
}

// checkStored reads the events stream message by message and counts how
// many times each published copy is stored. A copy that carries a
// Nats-Msg-Id is stored at most once, whatever its publisher retried: a
// PubAck lost to a leader change and the publish retried must come back as
// a duplicate, not as a second message. A copy without one may be stored
// twice (the ledger absorbs it); that is counted, not a violation.
func checkStored(ctx context.Context, js jetstream.JetStream, h history, r *Report) error {
	s, err := js.Stream(ctx, eventsStream)
	if err != nil {
		return fmt.Errorf("chaos: events stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	type stored struct {
		n      int
		msgIDs []string
	}
	got := map[string]*stored{}
	if info.State.Msgs > 0 {
		oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return fmt.Errorf("chaos: read events stream: %w", err)
		}
		it, err := oc.Messages()
		if err != nil {
			return err
		}
		defer it.Stop()
		for {
			m, err := it.Next()
			if err != nil {
				return fmt.Errorf("chaos: read events stream: %w", err)
			}
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			id := m.Headers().Get(chaosIDHeader)
			st := got[id]
			if st == nil {
				st = &stored{}
				got[id] = st
			}
			st.n++
			st.msgIDs = append(st.msgIDs, m.Headers().Get(jetstream.MsgIDHeader))
			if md.Sequence.Stream >= info.State.LastSeq {
				break
			}
		}
	}
	c := &r.Check
	for _, ev := range h.events {
		for _, cp := range ev.copies {
			st := got[cp.chaosID()]
			if st == nil {
				continue
			}
			if cp.msgID {
				for _, id := range st.msgIDs {
					if id != ev.msgID {
						c.MissingMsgID++
						if c.MissingMsgID <= 5 {
							r.violate("copy %s (%s %s %s) is stored with Nats-Msg-Id %q; its publisher was to send %q",
								cp.chaosID(), ev.dataset, ev.partition, ev.runID, id, ev.msgID)
						}
						break
					}
				}
			}
			if st.n < 2 {
				continue
			}
			if cp.msgID {
				c.StoredTwice++
				if c.StoredTwice <= 10 {
					r.violate("copy %s (%s %s %s) is stored %d times: a publish with Nats-Msg-Id %q was retried into a second message",
						cp.chaosID(), ev.dataset, ev.partition, ev.runID, st.n, ev.msgID)
				}
			} else {
				r.Messages.StoredTwiceNoMsgID++
			}
		}
	}
	if c.MissingMsgID > 5 {
		r.violate("... %d copies stored without their Nats-Msg-Id in all", c.MissingMsgID)
	}
	if c.StoredTwice > 10 {
		r.violate("... %d copies with a Nats-Msg-Id stored more than once in all", c.StoredTwice)
	}
	return nil
}
