package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/testkit/natstest"
)

// The shipped alert rules in a real Prometheus (prom_test.go), each driven
// by its real cause against a real idem serve, NATS and PostgreSQL, and each
// seen silent while all is well. The rules that wait minutes before firing
// (for:) run from a copy where only those durations are 2s (shortRules
// checks the rest is the shipped file); the dead-letter rules, which have no
// for:, run from the shipped file itself.

const ledgerCount = "SELECT count(*) FROM idem.run_ledger"

// clicksYAML: a second dataset, so a second replica's first dead letter is
// a series of its own.
const clicksYAML = `  clicks:
    strategy: delete_insert
    target: analytics.clicks
    partition_column: event_date
    source: SELECT id, event_date FROM staging.src WHERE event_date = @partition
`

func (w *world) publishTo(dataset, partition, runID string) {
	w.t.Helper()
	body := fmt.Sprintf(`{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID)
	_, err := w.js.PublishMsg(context.Background(), &nats.Msg{Subject: "idem.ready." + dataset, Data: []byte(body)})
	require.NoError(w.t, err)
}

// watched starts idem serve and has prom scrape it; it returns once the
// rules have been evaluated on its figures.
func (w *world) watched(prom *promServer) (*proc, string) {
	w.t.Helper()
	p := w.serve()
	addr := p.httpAddr()
	prom.setTargets(addr)
	prom.waitScraped(addr)
	prom.requireRulesHealthy()
	// Until the first scrape, no replica was ready: that alert resolves at
	// the next evaluation.
	prom.waitGone("IdemNoReplicaReady", nil, 10*time.Second)
	return p, addr
}

// TestAlertFirstFatalDeadLetterOfAFreshReplica: with the shipped rules, the
// first fatal dead letter of a replica started after Prometheus pages within
// two scrape and evaluation intervals of reaching the DLQ; and so does one
// that a replica dead-letters before Prometheus has ever scraped it (its
// series is born at 1, so increase() alone would never see it).
func TestAlertFirstFatalDeadLetterOfAFreshReplica(t *testing.T) {
	t.Parallel()
	prom := startProm(t, shippedRules)
	w := newWorld(t, opts{extraYAML: clicksYAML})
	w.db.Exec(t, "CREATE TABLE analytics.clicks (id bigint, event_date date NOT NULL)")
	w.streams()
	p, addr := w.watched(prom)
	require.Len(t, prom.query(`idem_dead_letters_total{dataset="orders",kind="fatal"} == 0`), 1, "the counter exists at 0 before any dead letter")
	w.publish("2026-11-01", "ok-1", nil)
	w.waitCount(1, ledgerCount)
	prom.requireSilent(3 * time.Second)

	w.publish("2030-01-01", "no-rows", nil) // no source rows: a fatal empty_source
	dl := w.waitDeadLetters(1)[0]
	a, seen := prom.waitFiring("IdemFatalDeadLetter", map[string]string{"dataset": "orders"}, 30*time.Second)
	logTiming(t, "IdemFatalDeadLetter (first of a fresh replica)", "the dead letter's PubAck", dl.Time, seen)
	bound := 2 * (promScrape + promEvaluate)
	require.LessOrEqual(t, a.ActiveAt.Sub(dl.Time), bound, "active at %s, dead letter stored at %s", a.ActiveAt, dl.Time)
	require.Equal(t, "page", a.Labels["severity"])
	require.Contains(t, a.Annotations["runbook"], "`idem dlq ls --dataset orders --kind fatal`")
	require.Contains(t, a.Annotations["description"], "1 fatal dead letter(s) for dataset orders")

	// A replica that meets a poison message in the backlog before its first
	// scrape: the first sample Prometheus ever has of its counter is 1.
	p.signal(syscall.SIGTERM)
	require.Zero(t, p.exit(t, 30*time.Second))
	w.publishTo("clicks", "2030-01-01", "no-rows-c")
	p2 := w.serve()
	w.waitDeadLetters(2)
	addr2 := p2.httpAddr()
	scrapedAt := time.Now()
	prom.setTargets(addr, addr2)
	_, seen = prom.waitFiring("IdemFatalDeadLetter", map[string]string{"dataset": "clicks"}, 30*time.Second)
	logTiming(t, "IdemFatalDeadLetter (born at 1)", "the target's discovery", scrapedAt, seen)
	first := prom.query(fmt.Sprintf(`min_over_time(idem_dead_letters_total{instance=%q,dataset="clicks",kind="fatal"}[10m])`, addr2))
	require.Len(t, first, 1)
	require.Equal(t, "1", first[0].Value[1], "Prometheus never saw this series at 0")
	require.Empty(t, prom.query(`sum by (job, dataset) (increase(idem_dead_letters_total{kind="fatal",dataset="clicks"}[10m])) > 0`),
		"increase() alone cannot see it: the case the rule's second half is for")
}

// TestAlertRetriesExhaustedAndDeadLettersWaiting: a transient error on every
// allowed attempt pages; the dead letter left in the stream warns (for: a
// day, shortened) until it is replayed.
func TestAlertRetriesExhaustedAndDeadLettersWaiting(t *testing.T) {
	t.Parallel()
	prom := startProm(t, shortRules(t))
	w := newWorld(t, opts{retries: 1, timeout: "200ms"})
	w.watched(prom)
	w.publish("2026-11-01", "ok-1", nil)
	w.waitCount(1, ledgerCount)
	prom.requireSilent(4 * time.Second)

	ctx := context.Background()
	tx, err := w.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE analytics.t IN ACCESS EXCLUSIVE MODE") // every attempt times out
	require.NoError(t, err)
	w.publish("2026-11-04", "r1", nil)
	dl := w.waitDeadLetters(1)[0]
	require.Equal(t, "exhausted", dl.Header.Get("Idem-Error-Kind"))
	a, seen := prom.waitFiring("IdemRetriesExhausted", map[string]string{"dataset": "orders", "kind": "exhausted"}, 30*time.Second)
	logTiming(t, "IdemRetriesExhausted", "the dead letter's PubAck", dl.Time, seen)
	require.Contains(t, a.Annotations["runbook"], "`idem dlq ls --dataset orders --kind exhausted`")
	_, seen = prom.waitFiring("IdemDeadLettersWaiting", map[string]string{"dataset": "orders"}, 60*time.Second)
	logTiming(t, "IdemDeadLettersWaiting (for: shortened from 24h to "+promShortFor+")", "the dead letter's PubAck", dl.Time, seen)

	require.NoError(t, tx.Rollback(ctx))
	out, err := exec.Command(idemBin, "dlq", "replay", "--all", "--config", w.cfg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	w.waitCount(2, ledgerCount)
	prom.waitGone("IdemDeadLettersWaiting", nil, 60*time.Second)
}

// TestAlertPartitionLateAndDashboard: a calendar partition whose event never
// came turns late when its deadline passes, and the alert pages; it resolves
// once the partition loads. On the way, every panel of the shipped Grafana
// dashboard is evaluated against this Prometheus and shows data.
func TestAlertPartitionLateAndDashboard(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	midnight := now.Truncate(24 * time.Hour)
	if next := midnight.Add(24 * time.Hour); next.Sub(now) < 3*time.Minute {
		time.Sleep(next.Sub(now) + time.Second) // the calendar below is for today's clock
		now, midnight = time.Now().UTC(), next
	}
	day1, day2 := midnight.AddDate(0, 0, -1).Format(time.DateOnly), midnight.AddDate(0, 0, -2).Format(time.DateOnly)
	// Yesterday (day1) turns late 50 s from now; the day before (day2)
	// is late already unless loaded, and will be.
	lateAt := now.Add(50 * time.Second).Truncate(time.Second)
	deadline := int(lateAt.Sub(midnight) / time.Second)
	prom := startProm(t, shortRules(t))
	w := newWorld(t, opts{orderFields: fmt.Sprintf("    expect: {every: day, from: %s, deadline: %ds}\n", day2, deadline)})
	w.db.Exec(t, fmt.Sprintf(`INSERT INTO staging.src SELECT 900000 + d * 100 + i, date '%s' + d, i, 'recent' FROM generate_series(0, 1) d, generate_series(1, 5) i`, day2))
	p := w.serve()
	addr := p.httpAddr()
	w.publish(day2, "on-time", nil)
	w.waitCount(1, ledgerCount)
	// The calendar's figures are read every 15 s: wait for the reading
	// after the load before Prometheus starts to look.
	metric := regexp.MustCompile(`(?m)^idem_partitions_late\{dataset="orders"\} 0$`)
	require.Eventually(t, func() bool { return metric.MatchString(scrape(t, addr)) }, 40*time.Second, 200*time.Millisecond)
	prom.setTargets(addr)
	prom.waitScraped(addr)
	prom.requireRulesHealthy()
	prom.waitGone("IdemNoReplicaReady", nil, 10*time.Second)

	trafficFrom := time.Now()
	for i := 1; i <= 5; i++ {
		w.publish(fmt.Sprintf("2026-11-%02d", i), "dash", nil)
	}
	w.waitCount(6, ledgerCount)
	prom.requireSilent(3 * time.Second)
	require.True(t, time.Now().Before(lateAt.Add(-time.Second)), "too slow: %s turned late before the silence was checked", day1)

	a, seen := prom.waitFiring("IdemPartitionsLate", map[string]string{"dataset": "orders"}, 90*time.Second)
	logTiming(t, "IdemPartitionsLate (for: shortened from 1m to "+promShortFor+")", "the deadline", lateAt, seen)
	v, err := strconv.ParseFloat(a.Value, 64)
	require.NoError(t, err)
	require.Equal(t, 1.0, v, "one partition late: %s", day1)
	require.Contains(t, a.Annotations["runbook"], "`idem backfill orders --wait`")

	requireDashboardData(t, prom, trafficFrom)

	w.publish(day1, "late", nil)
	w.waitCount(7, ledgerCount)
	prom.waitGone("IdemPartitionsLate", nil, 60*time.Second)
}

// scrape reads idem's /metrics.
func scrape(t *testing.T, addr string) string {
	r, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	return string(b)
}

// requireDashboardData evaluates every query of the shipped dashboard over
// the time since from, as Grafana would (its variables filled), and requires
// each to return at least one number: a panel that can never show data is a
// broken panel.
func requireDashboardData(t *testing.T, prom *promServer, from time.Time) {
	t.Helper()
	b, err := os.ReadFile("../deploy/grafana/idem-dashboard.json")
	require.NoError(t, err)
	var d struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	labelValues := regexp.MustCompile(`^label_values\((\w+), (\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(fmt.Sprint(v.Query))
		require.NotNil(t, m, "variable %s: %v", v.Name, v.Query)
		res := prom.query(m[1])
		require.NotEmpty(t, res, "variable %s: no %s series", v.Name, m[1])
		require.Equal(t, "idem", res[0].Metric[m[2]], "variable %s", v.Name)
	}
	// $__rate_interval is Grafana's: at least four scrape intervals.
	fill := strings.NewReplacer(`$job`, "idem", `$__rate_interval`, "10s")
	n := 0
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			expr := fill.Replace(tg.Expr)
			require.NotContains(t, expr, "$", "panel %q: a variable the test does not fill: %s", p.Title, tg.Expr)
			require.True(t, hasNumber(prom.queryRange(expr, from)), "panel %q shows no data: %s", p.Title, expr)
			n++
		}
	}
	t.Logf("dashboard: %d queries of %d panels return data", n, len(d.Panels))
}

func hasNumber(series []promSample) bool {
	for _, s := range series {
		for _, v := range s.Values {
			f, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
			if err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return true
			}
		}
	}
	return false
}

// TestAlertWarehouseCircuitAndNoReplicaReady: PostgreSQL stopped opens the
// circuit and pages (and no replica is ready meanwhile); it resolves when
// PostgreSQL is back; then idem itself stopped pages as no replica ready.
func TestAlertWarehouseCircuitAndNoReplicaReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := localpg.Start(ctx, localpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	prom := startProm(t, shortRules(t))
	w := newWorld(t, opts{pgAdmin: srv.URL("")})
	p, addr := w.watched(prom)
	w.publish("2026-11-01", "ok-1", nil)
	w.waitCount(1, ledgerCount)
	prom.requireSilent(4 * time.Second)

	require.NoError(t, srv.Stop(ctx, "fast"))
	stopped := time.Now()
	w.publish("2026-11-02", "during", nil)
	_, seen := prom.waitFiring("IdemWarehouseCircuitOpen", map[string]string{"instance": addr}, 60*time.Second)
	logTiming(t, "IdemWarehouseCircuitOpen (for: shortened from 5m to "+promShortFor+")", "PostgreSQL's stop", stopped, seen)
	_, seen = prom.waitFiring("IdemNoReplicaReady", nil, 60*time.Second)
	logTiming(t, "IdemNoReplicaReady (circuit open; for: shortened from 2m to "+promShortFor+")", "PostgreSQL's stop", stopped, seen)

	require.NoError(t, srv.Restart(ctx, ""))
	w.waitCount(2, ledgerCount)
	prom.waitGone("IdemWarehouseCircuitOpen", nil, 60*time.Second)
	prom.waitGone("IdemNoReplicaReady", nil, 60*time.Second)
	prom.requireSilent(3 * time.Second)

	p.signal(syscall.SIGTERM)
	require.Zero(t, p.exit(t, 30*time.Second))
	stopped = time.Now()
	_, seen = prom.waitFiring("IdemNoReplicaReady", nil, 60*time.Second)
	logTiming(t, "IdemNoReplicaReady (idem stopped; for: shortened from 2m to "+promShortFor+")", "idem's exit", stopped, seen)
}

// TestAlertOutboxStuck: a downstream event that cannot be published (the
// events stream is full and refuses new messages) pages once it has waited
// past the shipped threshold; it resolves when the relay gets it out.
func TestAlertOutboxStuck(t *testing.T) {
	t.Parallel()
	prom := startProm(t, shortRules(t))
	w := chainWorld(t)
	w.watched(prom)
	w.publish("2026-11-01", "r1", nil)
	w.waitCount(3, ledgerCount) // orders, b, c
	prom.requireSilent(4 * time.Second)

	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (2000)")
	w.publish("2026-11-02", "r2", nil)
	w.waitSleeping()
	restore := natstest.FillStream(t, w.js, "IDEM_EVENTS", 0)
	w.db.Exec(t, "DELETE FROM staging.gate_on")
	require.Eventually(t, func() bool {
		return w.count("SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL") == 1 &&
			len(prom.query(`idem_outbox_publish_failures_total > 0`)) == 1
	}, 30*time.Second, 100*time.Millisecond, "b's event should be waiting, its publishes failing")
	// The threshold (300 s) is the shipped one; rather than wait five
	// minutes, the waiting row is made six minutes old.
	w.db.Exec(t, "UPDATE idem.outbox SET created_at = created_at - interval '6 minutes' WHERE sent_at IS NULL")
	aged := time.Now()
	a, seen := prom.waitFiring("IdemOutboxStuck", nil, 60*time.Second)
	logTiming(t, "IdemOutboxStuck (for: shortened from 5m to "+promShortFor+")", "the row passing 300 s", aged, seen)
	require.Equal(t, "page", a.Labels["severity"])

	restore()
	w.waitCount(6, ledgerCount)
	prom.waitGone("IdemOutboxStuck", nil, 90*time.Second)
}

// TestAlertBacklogGrowing: events arrive while a load holds the only slot;
// the backlog grows and the warning fires; it resolves once loads catch up.
func TestAlertBacklogGrowing(t *testing.T) {
	t.Parallel()
	prom := startProm(t, shortRules(t))
	w := newWorld(t, opts{inFlight: 1})
	w.watched(prom)
	w.publish("2026-11-01", "ok-1", nil)
	w.waitCount(1, ledgerCount)
	prom.requireSilent(4 * time.Second)

	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (120000)")
	w.publish("2026-11-02", "slow", nil)
	pid := w.waitSleeping()
	from := time.Now()
	var seen time.Time
	for i := 0; seen.IsZero(); i++ {
		require.Less(t, time.Since(from), 90*time.Second, "IdemConsumerLagGrowing did not fire; active: %v", prom.alerts())
		w.publish(fmt.Sprintf("2026-11-%02d", 3+i%28), fmt.Sprintf("lag-%d", i), nil)
		for _, a := range prom.alerts() {
			if a.matches("IdemConsumerLagGrowing", nil) && a.State == "firing" {
				seen = time.Now()
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	logTiming(t, "IdemConsumerLagGrowing (for: shortened from 15m to "+promShortFor+")", "the first event that waited", from, seen)

	w.db.Exec(t, "DELETE FROM staging.gate_on")
	w.db.Exec(t, "SELECT pg_cancel_backend($1)", pid) // the slow load fails and is retried
	w.waitSettled()
	prom.waitGone("IdemConsumerLagGrowing", nil, 60*time.Second)
}

// TestAlertDeadLetterStreamFull: the dead-letter stream is full (its limit
// reached, discard new); an event that must be dead-lettered stays in its
// stream, retried, and the page fires; once there is room it is
// dead-lettered, nothing lost.
func TestAlertDeadLetterStreamFull(t *testing.T) {
	t.Parallel()
	prom := startProm(t, shippedRules)
	w := newWorld(t, opts{})
	w.streams()
	w.watched(prom)
	w.publish("2026-11-01", "ok-1", nil)
	w.waitCount(1, ledgerCount)
	prom.requireSilent(3 * time.Second)

	restore := natstest.FillStream(t, w.js, "IDEM_DLQ", 1)
	w.publish("2030-01-01", "poison-1", nil) // the one dead letter the stream holds
	w.waitDeadLetters(1)
	w.publish("2030-01-02", "poison-2", nil)
	refused := time.Now()
	_, seen := prom.waitFiring("IdemDeadLetterPublishFailing", map[string]string{"dataset": "orders"}, 60*time.Second)
	logTiming(t, "IdemDeadLetterPublishFailing", "the event that cannot be dead-lettered", refused, seen)
	require.Len(t, w.deadLetters(), 1)
	ack, pending := w.pending()
	require.Positive(t, uint64(ack)+pending, "the refused event stays in its stream")

	restore()
	dls := w.waitDeadLetters(2)
	require.Equal(t, "poison-2", dls[1].Header.Get("Idem-Run-Id"))
	w.waitSettled()
}

// TestAlertCheckFailed: a check that refuses a load pages, naming the
// dataset and the check.
func TestAlertCheckFailed(t *testing.T) {
	t.Parallel()
	prom := startProm(t, shippedRules)
	w := newWorld(t, opts{extraYAML: salesYAML})
	w.db.Exec(t, salesSQL)
	w.watched(prom)
	require.Len(t, prom.query(`idem_checks_total{dataset="sales",check="unique(order_id)",result="fail"} == 0`), 1, "the failure series exists at 0")
	pub := func(runID string) {
		_, err := w.js.Publish(context.Background(), "idem.ready.sales", []byte(`{"dataset":"sales","partition":"2026-11-01","run_id":"`+runID+`"}`))
		require.NoError(t, err)
	}
	pub("good")
	w.waitCount(2, ledgerCount)
	prom.requireSilent(3 * time.Second)

	w.db.Exec(t, "INSERT INTO staging.sales SELECT * FROM staging.sales WHERE event_date = '2026-11-01'")
	pub("doubled")
	dl := w.waitDeadLetters(1)[0]
	a, seen := prom.waitFiring("IdemCheckFailed", map[string]string{"dataset": "sales", "check": "unique(order_id)"}, 30*time.Second)
	logTiming(t, "IdemCheckFailed", "the refused load's dead letter", dl.Time, seen)
	require.Equal(t, "page", a.Labels["severity"])
	require.Contains(t, a.Annotations["summary"], "sales: check unique(order_id) refused a load")
}
