package e2e

// The status page's actions in headless chromium, against a running `idem
// serve`: a red cell, its story, a reload confirmed with a reason, the cell
// turning green; and, without the token, nothing that can change anything.

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/browsertest"
)

// eventsLastSeq is the events stream's last sequence: what was published.
func (w *world) eventsLastSeq() uint64 {
	w.t.Helper()
	s, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(w.t, err)
	info, err := s.Info(context.Background())
	require.NoError(w.t, err)
	return info.State.LastSeq
}

// postAction posts an action's form as the page's script does and returns
// the status and the answer.
func postAction(t *testing.T, base, path string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// red makes orders 2026-11-02 red: its source is empty, the load fails
// fatally and the event is dead-lettered; 11-01 loads.
func red(t *testing.T, w *world) {
	t.Helper()
	w.db.Exec(t, "DELETE FROM staging.src WHERE event_date = '2026-11-02'")
	w.publish("2026-11-01", "r1", nil)
	w.publish("2026-11-02", "r1", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitDeadLetters(1)
}

const redCell = `#grid tr[data-d="orders"] td[data-i="1"]`

func TestStatusPageReloadsARedCell(t *testing.T) {
	t.Parallel()
	const token = "e2e-operator-token-0123456789"
	w := newWorld(t, opts{noRetries: true})
	w.streams()
	p := w.serve("IDEM_HTTP_TOKEN=" + token)
	red(t, w)
	base := "http://" + p.httpAddr()

	// A wrong token changes nothing.
	before := w.eventsLastSeq()
	code, body := postAction(t, base, "/actions/reload", url.Values{"dataset": {"orders"}, "partition": {"2026-11-02"},
		"who": {"mallory"}, "reason": {"x"}, "token": {token + "!"}})
	require.Equal(t, http.StatusForbidden, code, body)
	require.Equal(t, before, w.eventsLastSeq())
	require.Zero(t, w.count("SELECT count(*) FROM idem.operator_actions"))

	// The source is fixed in the database; the cell is still red.
	w.db.Exec(t, `INSERT INTO staging.src SELECT 3000 + i, date '2026-11-02', i, 'fixed' FROM generate_series(1, 10) i`)
	ctx := browsertest.New(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/?from=2026-11-01&to=2026-11-02"), chromedp.WaitVisible("#grid")))
	require.Equal(t, map[string]string{"2026-11-01": "success", "2026-11-02": "dead_lettered"},
		browsertest.Eval[map[string]map[string]string](t, ctx, cellClassesJS)["orders"])

	// The click opens its story: the attempt, the dead letter, the verdict.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(redCell), chromedp.WaitVisible("#act-reload")))
	story, err := chromedp.Run(ctx, chromedp.Text("#partition"))
	require.NoError(t, err)
	require.Contains(t, story, "empty_source")
	require.Contains(t, story, "In the dead-letter stream")
	verdict, err := chromedp.Run(ctx, chromedp.Text("#verdict"))
	require.NoError(t, err)
	require.Contains(t, verdict, "dead_lettered")
	next, err := chromedp.Run(ctx, chromedp.Text("#next"))
	require.NoError(t, err)
	require.Contains(t, next, "idem dlq replay ")
	require.True(t, browsertest.Eval[bool](t, ctx, `!!document.querySelector('#act-replay') && document.querySelector('#act-replay').textContent.startsWith('Replay dead letter ')`))

	// Reload, with a reason, confirmed.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click("#act-reload"), chromedp.WaitVisible("#confirm-reload"),
		chromedp.SendKeys(`#confirm-reload input[name="reason"]`, "staging refilled"),
		chromedp.SendKeys(`#confirm-reload input[name="who"]`, "alice"),
		chromedp.SendKeys(`#confirm-reload input[name="token"]`, token),
		chromedp.Click(`#confirm-reload button.go`)))
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('`+redCell+`').className === 'success' && document.querySelector('#progress').dataset.done === 'true'`,
		chromedp.WithPollingTimeout(60*time.Second)))
	require.NoError(t, err, "the cell did not turn green")
	progress, err := chromedp.Run(ctx, chromedp.Text("#progress"))
	require.NoError(t, err)
	require.Regexp(t, `^reload: orders 2026-11-02 published with run_id reload__\S+ \(forced\) as IDEM_EVENTS seq \d+ · loaded: loaded by run reload__`, progress)
	require.Equal(t, "loaded", browsertest.Eval[string](t, ctx, `document.querySelector('#partition').dataset.state`))

	// Recorded: who, why, what; the forced run loaded the fixed rows and
	// carries who asked and why.
	require.EqualValues(t, 1, w.count(`SELECT count(*) FROM idem.operator_actions WHERE action = 'reload' AND requested_by = 'alice'
		AND detail = '{"dataset": "orders", "partition": "2026-11-02", "reason": "staging refilled"}'::jsonb
		AND outcome LIKE 'orders 2026-11-02 published with run_id reload\_\_% (forced)%' AND finished_at IS NOT NULL`))
	require.EqualValues(t, 1, w.count(`SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-11-02' AND status = 'success'
		AND force AND run_id LIKE 'reload\_\_%' AND attributes = '{"idem.reason": "staging refilled", "idem.requested_by": "alice"}'::jsonb`))
	require.Equal(t, w.expected("2026-11-01", "2026-11-02"), w.target())

	// The grid, read again, agrees.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/?from=2026-11-01&to=2026-11-02"), chromedp.WaitVisible("#grid")))
	require.Equal(t, "success", browsertest.Eval[map[string]map[string]string](t, ctx, cellClassesJS)["orders"]["2026-11-02"])
}

func TestStatusPageWithoutATokenChangesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{noRetries: true})
	w.streams()
	p := w.serve()
	red(t, w)
	base := "http://" + p.httpAddr()
	dead := w.deadLetters()
	require.Len(t, dead, 1)

	// The story is there, with no button and no form.
	ctx := browsertest.New(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/?from=2026-11-01&to=2026-11-02"), chromedp.WaitVisible("#grid"),
		chromedp.Click(redCell), chromedp.WaitVisible("#verdict")))
	verdict, err := chromedp.Run(ctx, chromedp.Text("#verdict"))
	require.NoError(t, err)
	require.Contains(t, verdict, "dead_lettered")
	require.Zero(t, browsertest.Eval[int](t, ctx, `document.querySelectorAll('form, button.act, input').length - document.querySelectorAll('form.range, form.range input').length`))

	// Every action is refused, whatever token is guessed, and nothing is
	// published or recorded.
	events := w.eventsLastSeq()
	for _, c := range []struct {
		path string
		form url.Values
	}{
		{"/actions/reload", url.Values{"dataset": {"orders"}, "partition": {"2026-11-02"}}},
		{"/actions/replay", url.Values{"seq": {"1"}}},
		{"/actions/backfill", url.Values{"dataset": {"orders"}, "from": {"2026-11-01"}, "to": {"2026-11-05"}}},
	} {
		for _, tok := range []string{"", "e2e-operator-token-0123456789"} {
			c.form.Set("who", "mallory")
			c.form.Set("reason", "just looking")
			c.form.Set("token", tok)
			code, body := postAction(t, base, c.path, c.form)
			require.Equal(t, http.StatusForbidden, code, c.path)
			require.Contains(t, body, "actions are disabled")
		}
	}
	require.Equal(t, events, w.eventsLastSeq(), "nothing was published")
	require.Zero(t, w.count("SELECT count(*) FROM idem.operator_actions"), "nothing was recorded")
	require.Len(t, w.deadLetters(), 1, "the dead letter stays")
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-11-02' AND status = 'success'"))
}
