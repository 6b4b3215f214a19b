package statuspage_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/browsertest"
)

func TestPauseAndResumeNeedTheToken(t *testing.T) {
	w := newWorld(t)
	open := w.page(t, "")
	ctx := browsertest.New(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(open.URL+"/"), chromedp.WaitVisible("#grid")))
	require.Equal(t, 0, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#pause, #resume').length`), "no buttons without a token")
	form := url.Values{"dataset": {"orders"}, "reason": {"because"}, "who": {"mallory"}}
	for _, path := range []string{"/actions/pause", "/actions/resume"} {
		code, body := post(t, open, path, form, false)
		require.Equal(t, http.StatusForbidden, code, path)
		require.Contains(t, body, "actions are disabled")
	}
	srv := w.page(t, operatorToken)
	form.Set("token", "guess")
	code, _ := post(t, srv, "/actions/pause", form, true)
	require.Equal(t, http.StatusForbidden, code)
	in, err := audit.PausesInForce(context.Background(), w.db, "shop")
	require.NoError(t, err)
	require.Empty(t, in, "nothing was paused")
	require.Empty(t, actionRows(t, w), "nothing was recorded")

	form.Set("token", operatorToken)
	form.Del("reason")
	code, body := post(t, srv, "/actions/pause", form, true)
	require.Equal(t, http.StatusBadRequest, code, "a pause needs a reason")
	require.Contains(t, body, "say why")
}

// The pause form pauses the dataset, whose header says by whom and why;
// the resume form ends it; both are recorded.
func TestPauseAndResumeInTheBrowser(t *testing.T) {
	w := newWorld(t)
	srv := w.page(t, operatorToken)
	ctx := browsertest.New(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#pause"),
		chromedp.SetValue(`#pause select[name="dataset"]`, "orders"),
		chromedp.SendKeys(`#pause input[name="reason"]`, "upstream re-export"),
		chromedp.SendKeys(`#pause input[name="until"]`, "2h"),
		chromedp.SendKeys(`#pause input[name="who"]`, "alice"),
		chromedp.SendKeys(`#pause input[name="token"]`, operatorToken),
		chromedp.Click(`#pause button`),
		chromedp.WaitVisible("#paused-orders")))
	label, err := chromedp.Run(ctx, chromedp.Text("#paused-orders"))
	require.NoError(t, err)
	require.Regexp(t, `^paused by alice: upstream re-export, until \d{4}-\d\d-\d\d \d\d:\d\dZ$`, label)
	in, err := audit.PausesInForce(context.Background(), w.db, "shop")
	require.NoError(t, err)
	require.Contains(t, in, "orders")
	require.WithinDuration(t, time.Now().Add(2*time.Hour), *in["orders"].Until, time.Minute)

	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible("#resume"),
		chromedp.SetValue(`#resume select[name="dataset"]`, "orders"),
		chromedp.SendKeys(`#resume input[name="who"]`, "bob"),
		chromedp.SendKeys(`#resume input[name="token"]`, operatorToken),
	))
	// The page the pause sent back has a message too: only the resume's counts.
	require.True(t, browsertest.Eval[bool](t, ctx, `document.querySelector('#message').remove() === undefined`))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(`#resume button`),
		chromedp.WaitVisible("#message")))
	msg, err := chromedp.Run(ctx, chromedp.Text("#message"))
	require.NoError(t, err)
	require.Equal(t, "resume: orders resumed by bob", msg)
	require.Equal(t, 0, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#paused-orders').length`))
	in, err = audit.PausesInForce(context.Background(), w.db, "shop")
	require.NoError(t, err)
	require.Empty(t, in)
	rows := actionRows(t, w)
	require.Len(t, rows, 2)
	require.Equal(t, actionRow{Action: "pause", Who: "alice", Dataset: "orders", Reason: "upstream re-export"}, rows[0])
	require.Equal(t, "resume", rows[1].Action)
	require.Equal(t, "bob", rows[1].Who)
}
