package statuspage_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/statuspage"
	"github.com/idem-data/idem/testkit/browsertest"
)

// versions stands for the domain's restore and retract: it records what
// was asked and writes the attempt they write, so the page's story
// follows it.
type versions struct {
	w     *world
	mu    sync.Mutex
	asked []statuspage.VersionRequest
}

func (v *versions) do(ctx context.Context, restore bool, r statuspage.VersionRequest) (int64, string, error) {
	v.mu.Lock()
	v.asked = append(v.asked, r)
	n := len(v.asked)
	v.mu.Unlock()
	kind, run := audit.KindRetracted, "retract__1"
	if restore {
		kind, run = audit.KindRestored, "restore__r1__1"
	}
	err := pgx.BeginFunc(ctx, v.w.db, func(tx pgx.Tx) error {
		a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: r.Dataset, Partition: r.Partition, RunID: run},
			Attributes: map[string]string{"by": r.Who, "reason": r.Reason, "to_run": "r1"}}
		_, err := audit.RecordOperatorSuccess(ctx, tx, a, kind, audit.Rows{Inserted: 10, Deleted: 10})
		return err
	})
	return int64(n), kind + ": run " + run, err
}

func (v *versions) list() []statuspage.VersionRequest {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]statuspage.VersionRequest(nil), v.asked...)
}

// Without the token there is no button, and a post is refused before
// anything is asked.
func TestRestoreRetractNeedTheToken(t *testing.T) {
	w := newWorld(t)
	v := &versions{w: w}
	ro := w.pageWith(t, statuspage.Deps{Versions: v.do})
	resp, err := http.Get(ro.URL + "/partition?dataset=orders&partition=2026-11-01")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	ctx := browsertest.New(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(ro.URL+"/partition?dataset=orders&partition=2026-11-01"), chromedp.WaitVisible("#verdict")))
	require.Zero(t, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#act-restore, #act-retract, form').length`))

	srv := w.pageWith(t, statuspage.Deps{Token: operatorToken, Versions: v.do})
	for _, path := range []string{"/actions/restore", "/actions/retract"} {
		form := url.Values{"dataset": {"orders"}, "partition": {"2026-11-01"}, "who": {"mallory"}, "reason": {"x"}}
		code, _ := post(t, ro, path, form, true)
		require.Equal(t, http.StatusForbidden, code)
		form.Set("token", "wrong-token-wrong")
		code, _ = post(t, srv, path, form, true)
		require.Equal(t, http.StatusForbidden, code)
		form.Set("token", operatorToken)
		form.Del("reason")
		code, _ = post(t, srv, path, form, true)
		require.Equal(t, http.StatusBadRequest, code, "a reason is required")
	}
	require.Empty(t, v.list())
}

// A loaded partition retracted from its story, then restored: each
// confirmed with a reason, the page following the story to its verdict.
func TestRetractAndRestoreInTheBrowser(t *testing.T) {
	w := newWorld(t)
	v := &versions{w: w}
	srv := w.pageWith(t, statuspage.Deps{Token: operatorToken, Versions: v.do})
	ctx := browsertest.New(t)
	cell := `#grid tr[data-d="orders"] td[data-i="0"]`
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#grid")))
	require.Equal(t, "success", browsertest.Eval[string](t, ctx, `document.querySelector('`+cell+`').className`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(cell), chromedp.WaitVisible("#act-retract")))

	confirm := func(action, reason string) {
		t.Helper()
		form := "#confirm-" + action
		// The page keeps who and the token typed for the next action.
		require.NoError(t, chromedp.Do(ctx, chromedp.Click("#act-"+action), chromedp.WaitVisible(form)))
		require.True(t, browsertest.Eval[bool](t, ctx, `[...document.querySelectorAll('`+form+` input[name="who"], `+form+` input[name="token"]')].every(i => { i.value = ''; return true })`))
		require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(form+` input[name="who"]`, "alice"),
			chromedp.SendKeys(form+` input[name="token"]`, operatorToken),
			chromedp.Click(form+` button.go`)))
		require.False(t, browsertest.Eval[bool](t, ctx, `document.querySelector('`+form+`').checkValidity()`), "no reason, not sent")
		require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(form+` input[name="reason"]`, reason), chromedp.Click(form+` button.go`)))
	}
	confirm("retract", "test data")
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('`+cell+`').className === 'retracted' && document.querySelector('#progress').dataset.done === 'true'`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err)
	verdict, err := chromedp.Run(ctx, chromedp.Text("#verdict"))
	require.NoError(t, err)
	require.Contains(t, verdict, "retracted by alice")
	require.Contains(t, verdict, "test data")
	require.Equal(t, 0, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#act-retract').length`), "retracted: nothing to retract")

	confirm("restore", "wrong partition")
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('`+cell+`').className === 'success' && document.querySelector('#partition').dataset.state === 'loaded'`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err)
	verdict, err = chromedp.Run(ctx, chromedp.Text("#verdict"))
	require.NoError(t, err)
	require.Contains(t, verdict, "restored by alice")
	require.Contains(t, verdict, "to the rows of run r1: wrong partition")
	got := v.list()
	require.Len(t, got, 2)
	require.Equal(t, []string{"orders", "2026-11-01", "alice", "test data"}, []string{got[0].Dataset, got[0].Partition, got[0].Who, got[0].Reason})
	require.Equal(t, "wrong partition", got[1].Reason)
}
