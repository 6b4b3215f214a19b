package statuspage_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/statuspage"
	"github.com/idem-data/idem/internal/why"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/browsertest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m, browsertest.Stop) }

const (
	hostileRun    = `<script>window.pwned=1</script>`
	hostileError  = `column "x" <img src=x onerror="window.pwned=2"> does not exist`
	hostileColumn = `<img src=x onerror="window.pwned=3">`
)

// schemaRows are the cells of the story's schema changes, as the browser
// shows them.
func schemaRows(t *testing.T, ctx context.Context) [][]string {
	t.Helper()
	return browsertest.Eval[[][]string](t, ctx, `[...document.querySelectorAll('#schema-changes tbody tr')].map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent.trim()))`)
}

// world is a migrated database with an audit history, and a page over it.
type world struct {
	db       *pgxpool.Pool
	replayed []uint64
	mu       sync.Mutex
	// recheck, when set, is customers' recheck window.
	recheck *calendar.Window
	// definitions are the datasets' current definitions (hash, JSON).
	definitions map[string][2]string
}

func (w *world) attempt(t *testing.T, dataset, partition, runID, outcome string) {
	t.Helper()
	ctx := context.Background()
	k := audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: partition, RunID: runID}
	b, err := audittest.Begin(ctx, w.db, audit.Attempt{RunKey: k, TriggeredBy: "web:" + partition + ":r1"}, 0)
	require.NoError(t, err)
	switch outcome {
	case "success":
		require.NoError(t, audittest.Succeed(ctx, w.db, k, b.ID, audit.Rows{Inserted: 10}, false))
	case "fatal", "transient":
		require.NoError(t, audit.Fail(ctx, w.db, b.ID, errors.New(hostileError), outcome))
	case "started":
	}
}

// schemaChanges records cs beside the newest attempt of dataset's
// partition, as its load records them.
func (w *world) schemaChanges(t *testing.T, dataset, partition string, cs ...strategies.SchemaChange) {
	t.Helper()
	ctx := context.Background()
	var id int64
	var runID string
	require.NoError(t, w.db.QueryRow(ctx, `SELECT id, run_id FROM idem.pipeline_audit WHERE task_id = $1 AND partition_key = $2 ORDER BY id DESC LIMIT 1`,
		dataset, partition).Scan(&id, &runID))
	k := audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: partition, RunID: runID}
	require.NoError(t, audit.RecordSchemaChanges(ctx, w.db, id, k, cs))
}

func newWorld(t *testing.T) *world {
	db := audittest.NewDB(t)
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
	dss := []statuspage.Dataset{{Name: "orders", Calendar: cal}, {Name: "customers", Calendar: cal, Recheck: w.recheck}, {Name: "revenue", Upstreams: []string{"orders", "customers"}}}
	for i := range dss {
		dss[i].Definition = w.definitions[dss[i].Name][0]
	}
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
		Versions: d.Versions,
		Why: func(ctx context.Context, dataset, partition string) (why.Report, error) {
			ds := why.Dataset{Name: dataset}
			for _, d := range dss {
				if d.Name == dataset {
					ds.Upstreams, ds.Calendar = d.Upstreams, d.Calendar
					if d.Recheck != nil {
						ds.Recheck = &why.Recheck{Window: *d.Recheck, Every: time.Hour}
					}
					ds.Definition, ds.DefinitionJSON = w.definitions[dataset][0], []byte(w.definitions[dataset][1])
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
	// The load of orders 11-01 added a column; the dead-lettered one of
	// 11-02 was refused one, whose name is hostile.
	w.schemaChanges(t, "orders", "2026-11-01", strategies.SchemaChange{Column: "note", Change: strategies.ChangeNew, Action: strategies.ActionAdded,
		NewType: "text", Policy: strategies.OnSchemaChangeAppend, DDL: `ALTER TABLE "analytics"."orders" ADD COLUMN "note" text`})
	w.schemaChanges(t, "orders", "2026-11-02", strategies.SchemaChange{Column: hostileColumn, Change: strategies.ChangeNew, Action: strategies.ActionRefused,
		NewType: "text", Policy: strategies.OnSchemaChangeFail, Reason: "on_schema_change is fail", DDL: `ALTER TABLE "analytics"."orders" ADD COLUMN "x" text`})
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
	// Its verdict names the refused column and the fix; the change is a
	// row of the story, beside its attempt, its name as text.
	line, err := chromedp.Run(ctx, chromedp.Text("#verdict .line"))
	require.NoError(t, err)
	require.Regexp(t, `^dead-lettered \S+ \S+Z: `+regexp.QuoteMeta("schema_mismatch: new column "+hostileColumn+
		` text (on_schema_change: fail); fix the target with ALTER TABLE "analytics"."orders" ADD COLUMN "x" text or set on_schema_change: append_new_columns on orders, then:`)+`$`, line)
	refused := schemaRows(t, ctx)
	require.Len(t, refused, 1)
	require.Equal(t, []string{hostileRun, hostileColumn, "new_column", "–", "text", "fail", "refused",
		`on_schema_change is fail ALTER TABLE "analytics"."orders" ADD COLUMN "x" text`}, refused[0][:8])
	require.Equal(t, browsertest.Eval[string](t, ctx, `document.querySelector('#attempts tbody tr').dataset.id`),
		browsertest.Eval[string](t, ctx, `document.querySelector('#schema-changes tbody tr').dataset.auditId`), "beside its attempt")
	require.Equal(t, "rgb(209, 36, 47)", browsertest.Eval[string](t, ctx, `getComputedStyle(document.querySelector('#schema-changes td.done')).color`))

	// The loaded cell's story shows the column its load added, and says so
	// in its verdict.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#grid tr[data-d="orders"] td[data-i="0"]`),
		chromedp.WaitVisible(`#partition[data-partition="2026-11-01"] #schema-changes`)))
	line, err = chromedp.Run(ctx, chromedp.Text("#verdict .line"))
	require.NoError(t, err)
	require.Regexp(t, `^loaded by run r1 at \S+ \S+Z, 10 rows, no checks; added column note text \(append_new_columns\); nothing pending$`, line)
	added := schemaRows(t, ctx)
	require.Len(t, added, 1)
	require.Equal(t, []string{"r1", "note", "new_column", "–", "text", "append_new_columns", "added", `ALTER TABLE "analytics"."orders" ADD COLUMN "note" text`}, added[0][:8])

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

// A partition waiting for its source shows as waiting in the grid and in
// its story, with why and until when; a loaded one lists the files its
// load read, their names as text.
func TestPageShowsSourceWaitsAndFiles(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	published := time.Now().Add(-10 * time.Minute)
	require.NoError(t, audit.RecordWait(ctx, w.db, audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-03", RunID: "cron-3"},
		"marker _SUCCESS not found in file:///landing/dt=2026-11-03/", published, published.Add(6*time.Hour), false))
	var id int64
	require.NoError(t, w.db.QueryRow(ctx, `SELECT id FROM idem.pipeline_audit WHERE task_id = 'orders' AND partition_key = '2026-11-01'`).Scan(&id))
	b := &pgx.Batch{}
	require.NoError(t, audit.QueueRecordSourceFiles(b, id, audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-01", RunID: "r1"}, "fp-1",
		[]audit.SourceFile{{URL: "s3://landing/dt=2026-11-01/" + hostileColumn + ".csv", Size: 2048, ETag: `"e1"`, Rows: 10}}))
	require.NoError(t, w.db.SendBatch(ctx, b).Close())
	srv := w.page(t, "")
	bctx := browsertest.New(t)

	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#grid")))
	require.Equal(t, "waiting", browsertest.Eval[string](t, bctx, `document.querySelector('#grid tr[data-d="orders"] td[data-i="2"]').className`),
		"the wait is newer than the failed attempt")
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(`#grid tr[data-d="orders"] td[data-i="2"]`), chromedp.WaitVisible("#partition #waiting")))
	require.Equal(t, why.StateWaiting, browsertest.Eval[string](t, bctx, `document.querySelector('#partition').dataset.state`))
	waiting, err := chromedp.Run(bctx, chromedp.Text("#waiting"))
	require.NoError(t, err)
	require.Contains(t, waiting, "waiting for its source since")
	require.Contains(t, waiting, "run cron-3 · marker _SUCCESS not found")
	line, err := chromedp.Run(bctx, chromedp.Text("#verdict .line"))
	require.NoError(t, err)
	require.Regexp(t, `^waiting for its source since \S+ \S+Z \(run cron-3, no attempt spent\): marker _SUCCESS not found in file:///landing/dt=2026-11-03/; checked 1 time\(s\), last at \S+ \S+Z; gives up at \S+ \S+Z and dead-letters it$`, line)

	require.NoError(t, chromedp.Do(bctx, chromedp.Click(`#grid tr[data-d="orders"] td[data-i="0"]`), chromedp.WaitVisible(`#partition[data-partition="2026-11-01"] #source-files`)))
	files := browsertest.Eval[[][]string](t, bctx, `[...document.querySelectorAll('#source-files tbody tr')].map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent.trim()))`)
	require.Equal(t, [][]string{{fmt.Sprint(id), "s3://landing/dt=2026-11-01/" + hostileColumn + ".csv", "2048", "10", `etag "e1"`}}, files)
	require.True(t, browsertest.Eval[bool](t, bctx, `window.pwned === undefined`))
	require.Equal(t, 0, browsertest.Eval[int](t, bctx, `document.querySelectorAll('#partition img').length`))
}

// fingerprint stores fp as the one the newest attempt of dataset's
// partition read, as its load's success does.
func (w *world) fingerprint(t *testing.T, dataset, partition string, fp audit.SourceFingerprint) {
	t.Helper()
	ctx := context.Background()
	var id int64
	var runID string
	require.NoError(t, w.db.QueryRow(ctx, `SELECT id, run_id FROM idem.pipeline_audit WHERE task_id = $1 AND partition_key = $2 ORDER BY id DESC LIMIT 1`,
		dataset, partition).Scan(&id, &runID))
	b := &pgx.Batch{}
	require.NoError(t, audit.QueueRecordFingerprint(b, id, audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: partition, RunID: runID}, fp))
	require.NoError(t, w.db.SendBatch(ctx, b).Close())
}

func fingerprintOf(hash, count string) audit.SourceFingerprint {
	return audit.SourceFingerprint{Hash: hash, Values: []audit.FingerprintValue{{Name: "count", Value: &count}}}
}

func TestPageShowsProvisionalPartitionsAndWhatARecheckFound(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// customers is rechecked over 7 days; the page's clock is 2026-11-05
	// 10:00Z, so 2026-11-01 and 2026-11-02 are inside the window. 11-02
	// was reloaded because a recheck found its source changed.
	w.recheck = &calendar.Window{Length: 7 * 24 * time.Hour}
	w.attempt(t, "customers", "2026-11-02", "sched-2", "success")
	w.fingerprint(t, "customers", "2026-11-02", fingerprintOf("aaaa", "1204"))
	k := audit.RunKey{Pipeline: "shop", Dataset: "customers", Partition: "2026-11-02"}
	require.NoError(t, audit.RecordMove(ctx, w.db, k, 0, fingerprintOf("aaaa", "1204"), fingerprintOf("bbbb", "1377"), "recheck__bbbb"))
	w.attempt(t, "customers", "2026-11-02", "recheck__bbbb", "success")
	w.fingerprint(t, "customers", "2026-11-02", fingerprintOf("bbbb", "1377"))
	srv := w.page(t, "")
	bctx := browsertest.New(t)

	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#grid")))
	cell := func(ds string, i int) string {
		return browsertest.Eval[string](t, bctx, fmt.Sprintf(`document.querySelector('#grid tr[data-d="%s"] td[data-i="%d"]').className`, ds, i))
	}
	require.Equal(t, "provisional", cell("customers", 0))
	require.Equal(t, "provisional", cell("customers", 1))
	require.Equal(t, "success", cell("orders", 0), "a dataset without recheck: final at once")
	require.True(t, browsertest.Eval[bool](t, bctx, `[...document.querySelectorAll('.legend .cell')].some(c => c.classList.contains('provisional'))`),
		"the legend names provisional")

	require.NoError(t, chromedp.Do(bctx, chromedp.Click(`#grid tr[data-d="customers"] td[data-i="1"]`), chromedp.WaitVisible("#partition #recheck-move")))
	require.Equal(t, why.StateProvisional, browsertest.Eval[string](t, bctx, `document.querySelector('#partition').dataset.state`))
	move, err := chromedp.Run(bctx, chromedp.Text("#recheck-move"))
	require.NoError(t, err)
	require.Contains(t, move, "source changed (count 1204 → 1377)")
	require.Contains(t, move, "reload run recheck__bbbb")
	line, err := chromedp.Run(bctx, chromedp.Text("#verdict .line"))
	require.NoError(t, err)
	require.Regexp(t, `^loaded by run recheck__bbbb at .*, reloaded after a recheck found at \S+ \S+Z that its source changed \(count 1204 → 1377\).*; provisional until 2026-11-09 00:00`, line)
	prov, err := chromedp.Run(bctx, chromedp.Text("#provisional"))
	require.NoError(t, err)
	require.Contains(t, prov, "provisional until 2026-11-09 00:00")
}

// A partition loaded under an older definition is outdated in the grid,
// with its own colour and legend entry, and its story says what changed
// and the command that reloads it; one loaded before definitions were
// recorded is not known to be, and stays loaded.
func TestPageShowsOutdated(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.definitions = map[string][2]string{"customers": {"cur", `{"checks":[{"not_null":["id"]}],"source":"SELECT 2","strategy":"merge"}`}}
	require.NoError(t, audit.RecordDefinition(ctx, w.db, "shop", "customers", "old", []byte(`{"source":"SELECT 1","strategy":"merge"}`)))
	for part, hash := range map[string]string{"2026-11-02": "old", "2026-11-03": "cur"} {
		_, err := audittest.Load(ctx, w.db, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "customers", Partition: part, RunID: "r1"},
			DefinitionHash: hash}, audit.Rows{Inserted: 3})
		require.NoError(t, err)
	}
	srv := w.page(t, "")
	bctx := browsertest.New(t)

	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#grid")))
	cells := browsertest.Eval[[]string](t, bctx, `[...document.querySelectorAll('#grid tr[data-d="customers"] td')].map(td => td.className + ' ' + getComputedStyle(td).backgroundColor)`)
	require.Equal(t, []string{"success rgb(46, 164, 79)", "outdated rgb(163, 230, 53)", "success rgb(46, 164, 79)", "late rgb(124, 45, 146)"}, cells)
	legend, err := chromedp.Run(bctx, chromedp.Text(".legend"))
	require.NoError(t, err)
	require.Regexp(t, `outdated 1\b`, legend)

	require.NoError(t, chromedp.Do(bctx, chromedp.Click(`#grid tr[data-d="customers"] td[data-i="1"]`),
		chromedp.WaitVisible(`#partition[data-partition="2026-11-02"]`)))
	require.Equal(t, "outdated", browsertest.Eval[string](t, bctx, `document.querySelector('#partition').dataset.status`))
	require.Equal(t, why.StateOutdated, browsertest.Eval[string](t, bctx, `document.querySelector('#partition').dataset.state`))
	line, err := chromedp.Run(bctx, chromedp.Text("#verdict .line"))
	require.NoError(t, err)
	require.Regexp(t, "^loaded under an older definition \\(checks, source changed\\); `idem backfill customers --reprocess outdated` reloads it; loaded by run r1 at ", line)
	next, err := chromedp.Run(bctx, chromedp.Text("#next"))
	require.NoError(t, err)
	require.Equal(t, "idem backfill customers --reprocess outdated", strings.TrimSpace(next))

	require.NoError(t, chromedp.Do(bctx, chromedp.Click(`#grid tr[data-d="customers"] td[data-i="0"]`),
		chromedp.WaitVisible(`#partition[data-partition="2026-11-01"]`)))
	require.Equal(t, why.StateLoaded, browsertest.Eval[string](t, bctx, `document.querySelector('#partition').dataset.state`))
}
