package e2e

// The status page in headless chromium, against a running `idem serve` (and
// `idem dev`) on real NATS and PostgreSQL.

import (
	"bufio"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/browsertest"
)

const hostileRunID = `<script>window.pwned=1</script>`

// cellClasses maps each dataset's row to its cells' partition and class.
const cellClassesJS = `(() => {
	const keys = JSON.parse(document.getElementById('keys').textContent);
	const out = {};
	for (const tr of document.querySelectorAll('#grid tbody tr')) {
		const row = {};
		for (const td of tr.querySelectorAll('td')) row[keys[Number(td.dataset.i)]] = td.className;
		out[tr.dataset.d] = row;
	}
	return out; })()`

func TestStatusPageOnARunningServe(t *testing.T) {
	t.Parallel()
	const token = "e2e-operator-token-0123456789"
	w := newWorld(t, opts{noRetries: true, orderFields: "    expect: {every: day, from: 2026-11-01, deadline: 1h}\n"})
	w.streams()
	// 11-02 and 11-03 have no source rows: fatal, dead-lettered.
	w.db.Exec(t, "DELETE FROM staging.src WHERE event_date IN ('2026-11-02', '2026-11-03')")
	p := w.serve()
	w.publish("2026-11-01", "r1", nil)
	w.publish("2026-11-02", hostileRunID, nil)
	w.publish("2026-11-03", "r1", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitDeadLetters(2)
	base := "http://" + p.httpAddr()

	ctx := browsertest.New(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/?from=2026-11-01&to=2026-11-05"), chromedp.WaitVisible("#grid")))
	cells := browsertest.Eval[map[string]map[string]string](t, ctx, cellClassesJS)
	require.Equal(t, "PostgreSQL directly, statements: prepare (auto)",
		browsertest.Eval[string](t, ctx, `document.querySelector('#h-postgres').textContent`), "the route found at start")
	// The calendar started on 11-01 with a one-hour deadline: every day not
	// loaded is late by now.
	require.Equal(t, map[string]map[string]string{"orders": {
		"2026-11-01": "success", "2026-11-02": "dead_lettered", "2026-11-03": "dead_lettered", "2026-11-04": "late", "2026-11-05": "late",
	}}, cells)
	health, err := chromedp.Run(ctx, chromedp.Text("#health"))
	require.NoError(t, err)
	require.Contains(t, health, "warehouse up")
	require.Contains(t, health, "NATS CONNECTED")
	require.Contains(t, health, "1 replica")

	// A click on a failed cell shows its error; the hostile run_id is text.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#grid tr[data-d="orders"] td[data-i="1"]`), chromedp.WaitVisible("#partition")))
	detail, err := chromedp.Run(ctx, chromedp.Text("#partition"))
	require.NoError(t, err)
	require.Contains(t, detail, "empty_source")
	require.Contains(t, detail, hostileRunID)
	require.True(t, browsertest.Eval[bool](t, ctx, `window.pwned === undefined && document.querySelectorAll('#partition script').length === 0`))

	// Without a token: no action buttons, and action requests are refused.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/dead-letters"), chromedp.WaitVisible("#dlq")))
	require.Equal(t, 2, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#dlq tbody tr').length`))
	require.Equal(t, 0, browsertest.Eval[int](t, ctx, `document.querySelectorAll('button').length`))
	require.True(t, browsertest.Eval[bool](t, ctx, `window.pwned === undefined`))
	resp, err := http.PostForm(base+"/actions/replay", url.Values{"seq": {"1"}, "who": {"mallory"}, "token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	// With a token: fix the data, replay 11-03 from the page, it loads.
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second), p.output())
	w.db.Exec(t, `INSERT INTO staging.src SELECT 2000 + i, date '2026-11-03', i, 'fixed' FROM generate_series(1, 10) i`)
	p = w.serve("IDEM_HTTP_TOKEN=" + token)
	base = "http://" + p.httpAddr()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/dead-letters"), chromedp.WaitVisible("#act")))
	seq := browsertest.Eval[string](t, ctx, `[...document.querySelectorAll('#dlq tbody tr')].find(tr => tr.textContent.includes('2026-11-03')).dataset.seq`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(`#act input[name="who"]`, "alice"),
		chromedp.SendKeys(`#act input[name="token"]`, token),
		chromedp.Click(`button[name="seq"][value="`+seq+`"]`),
		chromedp.WaitVisible("#message"),
	))
	msg, err := chromedp.Run(ctx, chromedp.Text("#message"))
	require.NoError(t, err)
	require.Contains(t, msg, "replay: seq "+seq+" (orders 2026-11-03 run r1) republished")
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-11-03' AND status = 'success'")
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.operator_actions WHERE requested_by = 'alice' AND action = 'replay' AND outcome LIKE 'seq % republished%'"))
	require.Len(t, w.deadLetters(), 1, "the replayed dead letter left the stream")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/?from=2026-11-01&to=2026-11-05"), chromedp.WaitVisible("#grid")))
	require.Equal(t, "success", browsertest.Eval[map[string]map[string]string](t, ctx, cellClassesJS)["orders"]["2026-11-03"])
}

// `idem dev` prints the page's address and leaves a grid worth looking at.
// With IDEM_SCREENSHOT=path the grid is saved there (the README's picture).
func TestDevLeavesAGrid(t *testing.T) {
	t.Parallel()
	db := newWorld(t, opts{}).db // a database of its own; dev makes its tables
	cmd := exec.Command(idemBin, "dev")
	cmd.Env = append(os.Environ(), "IDEM_DATABASE_URL="+db.URL)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGINT); _ = cmd.Wait() })
	var mu sync.Mutex
	var log strings.Builder
	addrc := make(chan string, 1)
	served := make(chan struct{})
	go func() {
		re := regexp.MustCompile(`status page on http://(\S+)/`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
			if strings.Contains(sc.Text(), "Still serving") {
				close(served)
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrc:
	case <-time.After(2 * time.Minute):
		t.Fatal("idem dev printed no status page address")
	}
	select {
	case <-served:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the scenario did not finish:\n%s", log.String())
	}
	ctx := browsertest.New(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1100, 420), chromedp.Navigate("http://"+addr+"/?from=2026-11-22&to=2026-11-29"), chromedp.WaitVisible("#grid")))
	cells := browsertest.Eval[map[string]map[string]string](t, ctx, cellClassesJS)
	require.Equal(t, map[string]string{
		"2026-11-22": "rejected", "2026-11-23": "late", "2026-11-24": "dead_lettered", "2026-11-25": "success",
		"2026-11-26": "success", "2026-11-27": "late", "2026-11-28": "success", "2026-11-29": "late",
	}, cells["orders"])
	require.Equal(t, "waiting", cells["daily_revenue"]["2026-11-24"])
	require.Equal(t, "success", cells["daily_revenue"]["2026-11-28"])
	require.Equal(t, "success", cells["customers"]["2026-11-28"])
	if path := os.Getenv("IDEM_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, png, 0o644))
	}
}
