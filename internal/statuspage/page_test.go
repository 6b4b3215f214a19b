package statuspage_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/audittest"
	"github.com/idem-data/idem/internal/browsertest"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/pgtest"
	"github.com/idem-data/idem/internal/statuspage"
	"github.com/idem-data/idem/internal/why"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

const (
	hostileRun   = `<script>window.pwned=1</script>`
	hostileError = `column "x" <img src=x onerror="window.pwned=2"> does not exist`
)

// world is a migrated database with an audit history, and a page over it.
type world struct {
	db       *pgxpool.Pool
	replayed []uint64
	mu       sync.Mutex
}

func (w *world) attempt(t *testing.T, dataset, partition, runID, outcome string) {
	t.Helper()
	ctx := context.Background()
	k := audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: partition, RunID: runID}
	b, err := audit.Begin(ctx, w.db, audit.Attempt{RunKey: k, TriggeredBy: "web:" + partition + ":r1"}, 0)
	require.NoError(t, err)
	switch outcome {
	case "success":
		require.NoError(t, audittest.Succeed(ctx, w.db, k, b.ID, audit.Rows{Inserted: 10}, false))
	case "fatal", "transient":
		require.NoError(t, audit.Fail(ctx, w.db, b.ID, errors.New(hostileError), outcome))
	case "started":
	}
}

func newWorld(t *testing.T) *world {
	db := pgtest.NewDB(t)
	_, err := audit.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	w := &world{db: db.Pool}
	w.attempt(t, "orders", "2026-11-01", "r1", "success")
	w.attempt(t, "orders", "2026-11-02", hostileRun, "fatal")
	w.attempt(t, "orders", "2026-11-03", "r1", "transient")
	w.attempt(t, "orders", "2026-11-04", "r1", "started")
	w.attempt(t, "customers", "2026-11-01", "r1", "success")
	return w
}

// streams is the events and dead-letter streams of a story: one dead
// letter, seq 7, failed at failedAt, and no event left in the events
// stream.
type streams struct{ failedAt time.Time }

func (s streams) Event(_ context.Context, seq uint64) (why.Event, error) {
	return why.Event{Seq: seq}, errors.New("no message found")
}

func (s streams) DeadLetters(_ context.Context, dataset string) ([]deadletter.Letter, error) {
	if dataset != "orders" {
		return nil, nil
	}
	return []deadletter.Letter{{Seq: 7, FailedAt: s.failedAt, StoredAt: s.failedAt, Kind: deadletter.KindFatal,
		Dataset: "orders", Partition: "2026-11-02", RunID: hostileRun, Error: hostileError}}, nil
}

func (w *world) page(t *testing.T, token string) *httptest.Server {
	t.Helper()
	return w.pageWith(t, statuspage.Deps{Token: token})
}

// pageWith serves the page over the world with d's token and actions; its
// stories are told by internal/why over the world's audit.
func (w *world) pageWith(t *testing.T, d statuspage.Deps) *httptest.Server {
	t.Helper()
	now := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	cal := &calendar.Expect{Every: calendar.Day, From: "2026-11-01", Deadline: 3 * time.Hour}
	// By the wall clock, as the audit's: a load after it wins.
	failedAt := time.Now()
	dss := []statuspage.Dataset{{Name: "orders", Calendar: cal}, {Name: "customers", Calendar: cal}, {Name: "revenue", Upstreams: []string{"orders", "customers"}}}
	p, err := statuspage.New(statuspage.Deps{
		Pipeline: "shop", DB: w.db, Token: d.Token, Now: func() time.Time { return now }, Log: zerolog.Nop(),
		Datasets: func() []statuspage.Dataset { return dss },
		Health: func(context.Context) statuspage.Health {
			return statuspage.Health{WarehouseUp: true, NATS: "CONNECTED", Pending: 3, Replicas: []statuspage.Replica{{Name: "a", Version: "v1"}}}
		},
		DeadLetters: func(context.Context) ([]statuspage.DeadLetter, error) {
			return []statuspage.DeadLetter{{Seq: 7, Time: now.Add(-time.Hour), Dataset: "orders", Partition: "2026-11-02", RunID: hostileRun,
				Kind: "fatal", Reason: hostileError, Subject: "idem.ready.orders"}}, nil
		},
		Replay: func(_ context.Context, seq uint64) (string, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.replayed = append(w.replayed, seq)
			return fmt.Sprintf("republished seq %d", seq), nil
		},
		Backfill: func(_ context.Context, ds, from, to string) (string, error) { return "2 partitions published", nil },
		Reload:   d.Reload,
		Why: func(ctx context.Context, dataset, partition string) (why.Report, error) {
			ds := why.Dataset{Name: dataset}
			for _, d := range dss {
				if d.Name == dataset {
					ds.Upstreams, ds.Calendar = d.Upstreams, d.Calendar
				}
			}
			return why.Tell(ctx, why.Sources{Pipeline: "shop", DB: w.db, Audit: w.db, Streams: streams{failedAt}, Now: func() time.Time { return now }}, ds, partition)
		},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func TestPageInTheBrowser(t *testing.T) {
	w := newWorld(t)
	srv := w.page(t, "")
	ctx := browsertest.New(t)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#grid")))
	// Each cell's class and colour, as the browser computed them.
	cells := browsertest.Eval[map[string][]string](t, ctx, `(() => {
		const out = {};
		for (const tr of document.querySelectorAll('#grid tbody tr')) {
			out[tr.dataset.d] = [...tr.querySelectorAll('td')].map(td => td.className + ' ' + getComputedStyle(td).backgroundColor);
		}
		return out; })()`)
	require.Equal(t, map[string][]string{
		// 11-04 ended at 11-05 00:00 and is due at 03:00: late for customers.
		"orders":    {"success rgb(46, 164, 79)", "dead_lettered rgb(209, 36, 47)", "failed rgb(245, 158, 11)", "running rgb(59, 130, 246)"},
		"customers": {"success rgb(46, 164, 79)", "late rgb(124, 45, 146)", "late rgb(124, 45, 146)", "late rgb(124, 45, 146)"},
		"revenue":   {"none rgb(246, 247, 249)", "waiting rgb(147, 197, 253)", "waiting rgb(147, 197, 253)", "waiting rgb(147, 197, 253)"},
	}, cells)

	// A click on the dead-lettered cell shows its attempts, the hostile
	// run_id and error as text.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#grid tr[data-d="orders"] td[data-i="1"]`), chromedp.WaitVisible("#partition")))
	detail, err := chromedp.Run(ctx, chromedp.Text("#partition"))
	require.NoError(t, err)
	require.Contains(t, detail, hostileError)
	require.Contains(t, detail, hostileRun)
	require.Contains(t, detail, "failed (fatal)")
	require.Equal(t, 0, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#partition img, #partition script').length`))
	require.True(t, browsertest.Eval[bool](t, ctx, `window.pwned === undefined`))

	// The dead letters: inert strings, and no action without a token.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/dead-letters"), chromedp.WaitVisible("#dlq")))
	row, err := chromedp.Run(ctx, chromedp.Text(`#dlq tr[data-seq="7"]`))
	require.NoError(t, err)
	require.Contains(t, row, hostileError)
	require.Contains(t, row, hostileRun)
	require.True(t, browsertest.Eval[bool](t, ctx, `window.pwned === undefined`))
	require.Equal(t, 0, browsertest.Eval[int](t, ctx, `document.querySelectorAll('button, form.action').length`))
	for _, path := range []string{"/actions/replay", "/actions/backfill"} {
		resp, err := http.PostForm(srv.URL+path, url.Values{"seq": {"7"}, "who": {"mallory"}, "token": {""}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
	}
	require.Empty(t, w.replayed)
}

func TestPageActionsWithAToken(t *testing.T) {
	w := newWorld(t)
	srv := w.page(t, "s3cret-token")
	ctx := browsertest.New(t)

	// A wrong token is refused and nothing is replayed.
	resp, err := http.PostForm(srv.URL+"/actions/replay", url.Values{"seq": {"7"}, "who": {"mallory"}, "token": {"guess"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/dead-letters"), chromedp.WaitVisible("#dlq"),
		chromedp.SendKeys(`#act input[name="who"]`, "alice"),
		chromedp.SendKeys(`#act input[name="token"]`, "s3cret-token"),
		chromedp.Click(`button[name="seq"][value="7"]`),
		chromedp.WaitVisible("#message"),
	))
	msg, err := chromedp.Run(ctx, chromedp.Text("#message"))
	require.NoError(t, err)
	require.Equal(t, "replay: republished seq 7", strings.TrimSpace(msg))
	require.Equal(t, []uint64{7}, w.replayed)
	// Recorded with who asked, and shown.
	acts, err := audit.RecentActions(context.Background(), w.db, "shop", 5)
	require.NoError(t, err)
	require.Len(t, acts, 1)
	require.Equal(t, "alice", acts[0].RequestedBy)
	require.Equal(t, "republished seq 7", acts[0].Outcome)
	who, err := chromedp.Run(ctx, chromedp.Text("#actions"))
	require.NoError(t, err)
	require.Contains(t, who, "alice")
}
