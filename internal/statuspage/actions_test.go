package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/statuspage"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/browsertest"
)

const operatorToken = "s3cret-token"

// reloads records the reloads asked for, and fails them with err.
type reloads struct {
	mu    sync.Mutex
	asked [][4]string
	err   error
}

func (r *reloads) reload(_ context.Context, dataset, partition, who, reason string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, [4]string{dataset, partition, who, reason})
	if r.err != nil {
		return "", r.err
	}
	return dataset + " " + partition + " published with run_id reload__1 (forced)", nil
}

func (r *reloads) list() [][4]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][4]string(nil), r.asked...)
}

type actionRow struct{ Action, Who, Dataset, Partition, Reason, Outcome string }

func actionRows(t *testing.T, w *world) []actionRow {
	t.Helper()
	rows, err := w.db.Query(context.Background(), `
		SELECT action, requested_by, coalesce(detail ->> 'dataset', ''), coalesce(detail ->> 'partition', ''),
		       coalesce(detail ->> 'reason', ''), coalesce(outcome, '')
		  FROM idem.operator_actions ORDER BY id`)
	require.NoError(t, err)
	var out []actionRow
	for rows.Next() {
		var a actionRow
		require.NoError(t, rows.Scan(&a.Action, &a.Who, &a.Dataset, &a.Partition, &a.Reason, &a.Outcome))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

// post sends a form without following the redirect; with asJSON it asks
// for the page script's JSON answer.
func post(t *testing.T, srv *httptest.Server, path string, form url.Values, asJSON bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusSeeOther {
		return resp.StatusCode, resp.Header.Get("Location")
	}
	return resp.StatusCode, string(b)
}

func TestReloadNeedsTheToken(t *testing.T) {
	w := newWorld(t)
	r := &reloads{}
	form := url.Values{"dataset": {"orders"}, "partition": {"2026-11-02"}, "who": {"mallory"}, "reason": {"because"}}

	open := w.pageWith(t, statuspage.Deps{Reload: r.reload})
	code, body := post(t, open, "/actions/reload", form, false)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "actions are disabled")

	srv := w.pageWith(t, statuspage.Deps{Token: operatorToken, Reload: r.reload})
	for _, tok := range []string{"", "guess", operatorToken + "x"} {
		f := url.Values{"token": {tok}}
		for k, v := range form {
			f[k] = v
		}
		code, body = post(t, srv, "/actions/reload", f, true)
		require.Equal(t, http.StatusForbidden, code, tok)
		require.Contains(t, body, "wrong operator token")
	}
	require.Empty(t, r.list(), "nothing was reloaded")
	require.Empty(t, actionRows(t, w), "nothing was recorded")
}

func TestReloadRefusesBadRequests(t *testing.T) {
	w := newWorld(t)
	r := &reloads{}
	srv := w.pageWith(t, statuspage.Deps{Token: operatorToken, Reload: r.reload})
	for _, c := range []struct {
		name string
		set  url.Values
		code int
		says string
	}{
		{"unknown dataset", url.Values{"dataset": {"shipments"}}, http.StatusNotFound, `dataset "shipments" is not configured`},
		{"no dataset", url.Values{"dataset": {""}}, http.StatusNotFound, `dataset "" is not configured`},
		{"bad partition", url.Values{"partition": {"2026-13-01"}}, http.StatusBadRequest, "partition: "},
		{"no partition", url.Values{"partition": {""}}, http.StatusBadRequest, "partition: "},
		{"no reason", url.Values{"reason": {"  "}}, http.StatusBadRequest, "say why"},
		{"long reason", url.Values{"reason": {strings.Repeat("x", 501)}}, http.StatusBadRequest, "say why"},
		{"unprintable reason", url.Values{"reason": {"a\nb"}}, http.StatusBadRequest, "say why"},
		{"no who", url.Values{"who": {""}}, http.StatusBadRequest, "say who asks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := url.Values{"dataset": {"orders"}, "partition": {"2026-11-02"}, "who": {"alice"}, "reason": {"source fixed"}, "token": {operatorToken}}
			for k, v := range c.set {
				f[k] = v
			}
			code, body := post(t, srv, "/actions/reload", f, false)
			require.Equal(t, c.code, code, body)
			require.Contains(t, body, c.says)
		})
	}
	require.Empty(t, r.list())
	require.Empty(t, actionRows(t, w))
}

func TestReloadIsRecorded(t *testing.T) {
	w := newWorld(t)
	r := &reloads{}
	srv := w.pageWith(t, statuspage.Deps{Token: operatorToken, Reload: r.reload})
	f := url.Values{"dataset": {"orders"}, "partition": {"2026-11-02"}, "who": {" alice "}, "reason": {"source fixed <b>upstream</b>"}, "token": {operatorToken}}

	// A form post goes back to the grid with the outcome.
	code, loc := post(t, srv, "/actions/reload", f, false)
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/?msg="+url.QueryEscape("reload: orders 2026-11-02 published with run_id reload__1 (forced)"), loc)

	// The page's script gets JSON; a failed reload says why, with 502.
	code, body := post(t, srv, "/actions/reload", f, true)
	require.Equal(t, http.StatusOK, code, body)
	var ok struct {
		ID      int64
		Action  string
		Outcome string
		OK      bool
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ok))
	require.True(t, ok.OK)
	require.Equal(t, "reload", ok.Action)
	require.Positive(t, ok.ID)
	r.err = errors.New("no stream IDEM_EVENTS answers")
	code, body = post(t, srv, "/actions/reload", f, true)
	require.Equal(t, http.StatusBadGateway, code)
	require.JSONEq(t, `{"id":`+jsonInt(ok.ID+1)+`,"action":"reload","outcome":"failed: no stream IDEM_EVENTS answers","ok":false}`, body)

	want := [4]string{"orders", "2026-11-02", "alice", "source fixed <b>upstream</b>"}
	require.Equal(t, [][4]string{want, want, want}, r.list())
	row := actionRow{"reload", "alice", "orders", "2026-11-02", "source fixed <b>upstream</b>", "orders 2026-11-02 published with run_id reload__1 (forced)"}
	failed := row
	failed.Outcome = "failed: no stream IDEM_EVENTS answers"
	require.Equal(t, []actionRow{row, row, failed}, actionRows(t, w))
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// Replay and backfill record the reason, and the replay its partition as
// the dead-letter stream names it.
func TestReplayAndBackfillRecordTheReason(t *testing.T) {
	w := newWorld(t)
	srv := w.pageWith(t, statuspage.Deps{Token: operatorToken})
	code, _ := post(t, srv, "/actions/replay", url.Values{"seq": {"7"}, "who": {"alice"}, "reason": {"bug fixed"}, "token": {operatorToken}}, false)
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = post(t, srv, "/actions/backfill", url.Values{"dataset": {"customers"}, "from": {"2026-11-02"}, "to": {"2026-11-04"},
		"who": {"bob"}, "reason": {"late export"}, "token": {operatorToken}}, false)
	require.Equal(t, http.StatusSeeOther, code)
	// Without a reason, as the dead-letter page's row buttons post.
	code, _ = post(t, srv, "/actions/replay", url.Values{"seq": {"8"}, "who": {"carol"}, "token": {operatorToken}}, false)
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, []actionRow{
		{"replay", "alice", "orders", "2026-11-02", "bug fixed", "republished seq 7"},
		{"backfill", "bob", "customers", "", "late export", "2 partitions published"},
		{"replay", "carol", "", "", "", "republished seq 8"},
	}, actionRows(t, w))
}

// The story's buttons follow its verdict, and only with a token.
func TestStoryButtonsFollowTheVerdict(t *testing.T) {
	w := newWorld(t)
	w.attempt(t, "customers", "2026-11-03", "r1", "success")
	get := func(srv *httptest.Server, ds, key string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/partition?dataset=" + url.QueryEscape(ds) + "&partition=" + url.QueryEscape(key))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	srv := w.pageWith(t, statuspage.Deps{Token: operatorToken})
	for _, c := range []struct {
		ds, key, state, status string
		buttons                []string
	}{
		{"orders", "2026-11-02", "dead_lettered", "dead_lettered", []string{"Replay dead letter 7", "Reload partition"}},
		{"orders", "2026-11-01", "loaded", "success", []string{"Reload partition"}},
		{"orders", "2026-11-03", "retrying", "failed", []string{"Reload partition"}},
		{"orders", "2026-11-04", "loading", "running", nil},
		// customers loaded 11-01 and 11-03: the gap around 11-02 is 11-02
		// alone; 11-04 is the last ended day.
		{"customers", "2026-11-02", "missing", "late", []string{"Backfill missing range"}},
		{"customers", "2026-11-04", "missing", "late", []string{"Backfill missing range"}},
	} {
		code, html := get(srv, c.ds, c.key)
		require.Equal(t, http.StatusOK, code, html)
		require.Contains(t, html, `data-state="`+c.state+`"`, c.key)
		require.Contains(t, html, `data-status="`+c.status+`"`, c.key)
		var got []string
		for _, b := range []string{"Replay dead letter 7", "Reload partition", "Backfill missing range"} {
			if strings.Contains(html, ">"+b+"</button>") {
				got = append(got, b)
			}
		}
		require.Equal(t, c.buttons, got, c.ds+" "+c.key)
		// Each button's confirm step asks for a reason.
		require.Equal(t, len(c.buttons), strings.Count(html, `name="reason" required`), c.key)
	}
	_, html := get(srv, "customers", "2026-11-02")
	require.Contains(t, html, `name="from" required value="2026-11-02"`)
	require.Contains(t, html, `name="to" required value="2026-11-02"`)
	_, html = get(srv, "customers", "2026-11-04")
	require.Contains(t, html, `name="from" required value="2026-11-04"`)

	// No token, no button, no form.
	ro := w.pageWith(t, statuspage.Deps{})
	_, html = get(ro, "orders", "2026-11-02")
	require.Contains(t, html, `data-state="dead_lettered"`)
	require.NotContains(t, html, "<form")
	require.NotContains(t, html, "Reload partition")

	code, body := get(ro, "shipments", "2026-11-02")
	require.Equal(t, http.StatusNotFound, code, body)
	code, body = get(ro, "orders", "2026-11-31")
	require.Equal(t, http.StatusBadRequest, code, body)
	code, _ = get(ro, "orders", "")
	require.Equal(t, http.StatusBadRequest, code)
}

// forcedSuccess records a forced run's load of a partition, as the
// consumer would after a reload.
func forcedSuccess(t *testing.T, w *world, dataset, partition, runID string) {
	t.Helper()
	ctx := context.Background()
	k := audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: partition, RunID: runID}
	b, err := audittest.Begin(ctx, w.db, audit.Attempt{RunKey: k, Force: true}, 0)
	require.NoError(t, err)
	require.NoError(t, audittest.Succeed(ctx, w.db, k, b.ID, audit.Rows{Inserted: 10}, true))
}

// A red cell, its story, the reload confirmed with a reason, and the cell
// turning green once the forced run loads it.
func TestReloadFromTheStoryInTheBrowser(t *testing.T) {
	w := newWorld(t)
	r := &reloads{}
	srv := w.pageWith(t, statuspage.Deps{Token: operatorToken, Reload: r.reload})
	ctx := browsertest.New(t)
	cell := `#grid tr[data-d="orders"] td[data-i="1"]`
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#grid")))
	require.Equal(t, "dead_lettered", browsertest.Eval[string](t, ctx, `document.querySelector('`+cell+`').className`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(cell), chromedp.WaitVisible("#act-reload")))
	verdict, err := chromedp.Run(ctx, chromedp.Text("#verdict"))
	require.NoError(t, err)
	require.Contains(t, verdict, "dead_lettered")
	require.Contains(t, verdict, hostileError)
	require.True(t, browsertest.Eval[bool](t, ctx, `window.pwned === undefined && document.querySelectorAll('#partition img, #partition script').length === 0`))

	// The confirm step: nothing is sent without a reason.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click("#act-reload"), chromedp.WaitVisible("#confirm-reload"),
		chromedp.SendKeys(`#confirm-reload input[name="who"]`, "alice"),
		chromedp.SendKeys(`#confirm-reload input[name="token"]`, operatorToken),
		chromedp.Click(`#confirm-reload button.go`)))
	require.False(t, browsertest.Eval[bool](t, ctx, `document.querySelector('#confirm-reload').checkValidity()`))
	require.Empty(t, r.list())
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#confirm-reload input[name="reason"]`, "source fixed"),
		chromedp.Click(`#confirm-reload button.go`)))
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('#progress').dataset.state === 'waiting'`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err)
	require.Equal(t, [][4]string{{"orders", "2026-11-02", "alice", "source fixed"}}, r.list())
	progress, err := chromedp.Run(ctx, chromedp.Text("#progress"))
	require.NoError(t, err)
	require.Contains(t, progress, "reload: orders 2026-11-02 published with run_id reload__1 (forced)")

	// The forced run loads: the page follows it to a final verdict.
	forcedSuccess(t, w, "orders", "2026-11-02", "reload__1")
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('`+cell+`').className === 'success' && document.querySelector('#progress').dataset.done === 'true'`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err)
	progress, err = chromedp.Run(ctx, chromedp.Text("#progress"))
	require.NoError(t, err)
	require.Contains(t, progress, "loaded: loaded by run reload__1")
	require.Equal(t, "loaded", browsertest.Eval[string](t, ctx, `document.querySelector('#partition').dataset.state`))
	require.Equal(t, []actionRow{{"reload", "alice", "orders", "2026-11-02", "source fixed", "orders 2026-11-02 published with run_id reload__1 (forced)"}},
		actionRows(t, w))
}
