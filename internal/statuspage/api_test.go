package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/why"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
)

const (
	apiHostileRun   = `<script>window.pwned=1</script>`
	apiHostileError = `column "x" <img src=x onerror="window.pwned=2"> does not exist & more`
	apiHostileNote  = `<i>dup</i> & "quoted"`
	apiToken        = "s3cret-operator-token"
)

// apiWorld is a migrated database with an audit history, written through
// the audit package as loads write it, at a fixed clock.
type apiWorld struct {
	db   *pgxpool.Pool
	now  time.Time
	dss  []Dataset
	dead []DeadLetter
}

type attemptOpts struct {
	rows   audit.Rows
	err    error
	kind   string // the error kind of a failed attempt
	checks []audit.CheckOutcome
	def    string // the definition's hash
}

// attempt records one attempt of dataset's partition that ends as outcome
// (success, failed or started) and returns its audit id.
func (w *apiWorld) attempt(t *testing.T, dataset, partition, runID, outcome string, o attemptOpts) int64 {
	t.Helper()
	ctx := context.Background()
	k := audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: partition, RunID: runID}
	a := audit.Attempt{RunKey: k, DefinitionHash: o.def}
	for _, pt := range []schemas.PartitionType{schemas.PartitionDate, schemas.PartitionHour} {
		if p, err := schemas.ParsePartition(pt, partition); err == nil {
			d, _ := p.LogicalDate()
			a.LogicalDate = &d
		}
	}
	b, err := audittest.Begin(ctx, w.db, a, 0)
	require.NoError(t, err)
	if b.Skipped {
		return b.ID
	}
	switch outcome {
	case "success":
		require.NoError(t, audittest.Succeed(ctx, w.db, k, b.ID, o.rows, false))
	case "failed":
		require.NoError(t, audit.Fail(ctx, w.db, b.ID, o.err, o.kind))
	case "started":
	default:
		t.Fatalf("outcome %q", outcome)
	}
	require.NoError(t, audit.RecordChecks(ctx, w.db, b.ID, k, o.checks))
	return b.ID
}

var apiCal = &calendar.Expect{Every: calendar.Day, From: "2026-11-01", Deadline: 12 * time.Hour}

// newAPIWorld: at 2026-11-05 10:00 UTC, days 11-01..11-04 have ended; with
// a 12h deadline, 11-03 is late and 11-04 still missing.
func newAPIWorld(t *testing.T) *apiWorld {
	t.Helper()
	db := audittest.NewDB(t)
	_, err := audit.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	w := &apiWorld{db: db.Pool, now: time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)}
	w.dss = []Dataset{
		{Name: "orders", Calendar: apiCal},
		{Name: "customers", Calendar: apiCal},
		{Name: "revenue", Upstreams: []string{"customers", "orders"}},
		{Name: "adhoc", Definition: "cur"},
		{Name: "clicks", PartitionType: schemas.PartitionHour,
			Calendar: &calendar.Expect{Every: calendar.Hour, From: "2026-11-05T00:00:00Z", Deadline: time.Hour}},
		{Name: "notes", PartitionType: schemas.PartitionText},
	}
	return w
}

// history writes the story of every status.
func (w *apiWorld) history(t *testing.T) {
	t.Helper()
	pass := audit.CheckOutcome{Name: "enough_rows", Kind: "row_count", Severity: "error", Status: "pass", Checked: 15, Threshold: ">= 1",
		Duration: time.Millisecond}
	w.attempt(t, "orders", "2026-11-01", "r1", "success", attemptOpts{rows: audit.Rows{Inserted: 10, Updated: 5, Deleted: 3},
		checks: []audit.CheckOutcome{pass}})
	w.attempt(t, "orders", "2026-11-01", "r1", "success", attemptOpts{}) // a duplicate: skipped
	w.attempt(t, "orders", "2026-11-02", apiHostileRun, "failed", attemptOpts{err: errors.New(apiHostileError), kind: audit.KindFatal})
	w.attempt(t, "orders", "2026-11-03", "r1", "failed", attemptOpts{err: errors.New("connection reset"), kind: audit.KindTransient})
	w.attempt(t, "orders", "2026-11-03", "r1", "failed", attemptOpts{err: errors.New("connection reset again"), kind: audit.KindTransient})
	w.attempt(t, "orders", "2026-11-04", "r1", "started", attemptOpts{})
	w.attempt(t, "customers", "2026-11-01", "r1", "success", attemptOpts{rows: audit.Rows{Inserted: 7, Deleted: -1}})
	w.attempt(t, "customers", "2026-11-02", "r1", "failed", attemptOpts{err: errors.New("checks refused the load: unique_id failed"), kind: audit.KindCheck,
		checks: []audit.CheckOutcome{pass, {Name: "unique_id", Kind: "unique", Severity: "error", Status: "fail", Failing: 2, Checked: 15,
			Threshold: "0 duplicates", Note: apiHostileNote, Samples: json.RawMessage(`[{"id":"<b>1</b>"}]`), Duration: 2 * time.Millisecond}}})
	w.attempt(t, "adhoc", "2026-11-03", "r1", "success", attemptOpts{rows: audit.Rows{Inserted: 1}, def: "cur"})
	// Loaded under an older definition, whose source differs.
	w.attempt(t, "adhoc", "2026-11-01", "r1", "success", attemptOpts{rows: audit.Rows{Inserted: 1}, def: "old"})
	require.NoError(t, audit.RecordDefinition(context.Background(), w.db, "shop", "adhoc", "old", []byte(`{"source":"SELECT 1","strategy":"delete_insert"}`)))
	// Emptied on purpose by an operator (idem retract).
	require.NoError(t, pgx.BeginFunc(context.Background(), w.db, func(tx pgx.Tx) error {
		_, err := audit.RecordOperatorSuccess(context.Background(), tx, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "adhoc",
			Partition: "2026-11-02", RunID: "retract__1"}, Attributes: map[string]string{"by": "alice", "reason": "test data"}}, audit.KindRetracted, audit.Rows{Deleted: 3})
		return err
	}))
	// A cancelled backfill's event: not loaded, not a failure.
	c, err := audit.Cancel(context.Background(), w.db, "shop", audit.Cancellation{RunID: "backfill__c", By: "carol", Reason: "wrong range"}, "")
	require.NoError(t, err)
	d := time.Date(2026, 11, 4, 0, 0, 0, 0, time.UTC)
	_, err = audit.RecordCancelled(context.Background(), w.db, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "adhoc", Partition: "2026-11-04", RunID: "backfill__c"}, LogicalDate: &d}, c)
	require.NoError(t, err)
	w.attempt(t, "clicks", "2026-11-05T01:00:00Z", "r1", "success", attemptOpts{rows: audit.Rows{Inserted: 4}})
	w.attempt(t, "notes", "eu/west <b>", "r1", "success", attemptOpts{rows: audit.Rows{Inserted: 2}})
	w.dead = []DeadLetter{{Seq: 7, Dataset: "orders", Partition: "2026-11-02", RunID: apiHostileRun, Kind: "fatal", Reason: apiHostileError}}
}

func (w *apiWorld) server(t *testing.T, d Deps) *httptest.Server {
	t.Helper()
	d.Pipeline, d.DB, d.Log = "shop", w.db, zerolog.Nop()
	d.Now = func() time.Time { return w.now }
	d.Datasets = func() []Dataset { return w.dss }
	d.Health = func(context.Context) Health { return Health{WarehouseUp: true, NATS: "CONNECTED"} }
	d.DeadLetters = func(context.Context) ([]DeadLetter, error) { return w.dead, nil }
	p, err := New(d)
	require.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func partition(t *testing.T, srv *httptest.Server, dataset, key string) partitionJSON {
	t.Helper()
	a := apiGet(t, srv, "/api/v1/partitions/"+url.PathEscape(dataset)+"/"+url.PathEscape(key))
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	var p partitionJSON
	a.decode(t, &p)
	return p
}

var wantStatuses = map[string][]Status{
	"orders":    {Success, DeadLettered, Failed, Running},
	"customers": {Success, Rejected, Late, Missing},
	"revenue":   {None, Waiting, Waiting, Waiting},
	"adhoc":     {Outdated, Retracted, Success, Cancelled},
}

var days = []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"}

// Each partition's answer is what the audit holds: the status of its
// latest attempt, that attempt's details, the attempts newest first
// (skipped duplicates aside) and the latest attempt's checks.
func TestAPIPartitionIsTheAudit(t *testing.T) {
	w := newAPIWorld(t)
	w.history(t)
	srv := w.server(t, Deps{})
	ctx := context.Background()

	for ds, want := range wantStatuses {
		for i, key := range days {
			got := partition(t, srv, ds, key)
			require.Equal(t, want[i], got.Status, "%s %s", ds, key)
			require.Equal(t, ds, got.Dataset)
			require.Equal(t, key, got.Partition)

			stored, err := audit.PartitionAttempts(ctx, w.db, "shop", ds, key, 100)
			require.NoError(t, err)
			var ran []audit.PartitionAttempt
			for _, a := range stored {
				if a.Status != audit.StatusSkipped {
					ran = append(ran, a)
				}
			}
			require.EqualValues(t, len(ran), got.Attempts.Count, "%s %s", ds, key)
			require.Len(t, got.Attempts.List, len(ran))
			for j, a := range ran {
				g := got.Attempts.List[j]
				require.Equal(t, a.RunID, g.RunID)
				require.Equal(t, a.Attempt, g.Attempt)
				require.Equal(t, a.Status, g.Status)
				require.Equal(t, a.Error, deref0(g.Error))
				require.Equal(t, a.ErrorKind, deref0(g.ErrorKind))
				require.True(t, a.StartedAt.Equal(g.StartedAt))
				require.Equal(t, a.FinishedAt == nil, g.FinishedAt == nil)
				if a.FinishedAt != nil {
					require.True(t, a.FinishedAt.Equal(*g.FinishedAt))
				}
			}
			if len(ran) == 0 {
				require.Nil(t, got.RunID)
				require.Nil(t, got.Rows)
				require.Nil(t, got.Error)
				require.Nil(t, got.FinishedAt)
				require.Empty(t, got.Checks)
				continue
			}
			latest := ran[0]
			require.Equal(t, latest.RunID, *got.RunID)
			require.Equal(t, latest.Error, deref0(got.Error))
			require.Equal(t, latest.ErrorKind, deref0(got.ErrorKind))
			require.Equal(t, latest.Status == audit.StatusSuccess, got.Rows != nil, "%s %s rows", ds, key)
			if got.Rows != nil {
				require.Equal(t, *latest.Rows, got.Rows.Inserted+got.Rows.Updated)
			}
			checks := partitionChecks(t, w.db, ds, key)
			var mine []checkRow
			for i := len(checks) - 1; i >= 0; i-- { // oldest first, as they ran
				if checks[i].AuditID == latest.ID {
					mine = append(mine, checks[i])
				}
			}
			require.Len(t, got.Checks, len(mine), "%s %s checks", ds, key)
			for j, c := range mine {
				g := got.Checks[j]
				require.Equal(t, []any{c.Name, c.Kind, c.Severity, c.Status, c.Failing, c.Checked, c.Threshold, c.Note},
					[]any{g.Name, g.Kind, g.Severity, g.Status, g.Failing, g.Checked, g.Threshold, g.Note})
				if c.Samples != "" {
					require.JSONEq(t, c.Samples, string(g.Samples))
				}
			}
		}
	}

	// The details, spelled out once.
	ok := partition(t, srv, "orders", "2026-11-01")
	require.Equal(t, &rowsJSON{Inserted: 10, Updated: 5, Deleted: ptr(int64(3))}, ok.Rows)
	require.EqualValues(t, 1, ok.Attempts.Count, "the skipped duplicate is no attempt")
	require.Equal(t, []string{"enough_rows"}, []string{ok.Checks[0].Name})
	require.Equal(t, time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC), *ok.Due)
	require.Nil(t, partition(t, srv, "customers", "2026-11-01").Rows.Deleted, "a TRUNCATE's deletes are not counted")
	failed := partition(t, srv, "orders", "2026-11-03")
	require.EqualValues(t, 2, failed.Attempts.Count)
	require.Equal(t, []int{2, 1}, []int{failed.Attempts.List[0].Attempt, failed.Attempts.List[1].Attempt})
	require.Equal(t, "connection reset again", *failed.Error)
	require.Equal(t, audit.KindTransient, *failed.ErrorKind)
	running := partition(t, srv, "orders", "2026-11-04")
	require.Nil(t, running.FinishedAt)
	require.Nil(t, running.Error)
	rejected := partition(t, srv, "customers", "2026-11-02")
	require.Equal(t, audit.KindCheck, *rejected.ErrorKind)
	require.Equal(t, []string{"pass", "fail"}, []string{rejected.Checks[0].Status, rejected.Checks[1].Status})
	require.Nil(t, partition(t, srv, "revenue", "2026-11-01").Due, "no calendar, no due")
	// A date never attempted and never expected.
	require.Equal(t, None, partition(t, srv, "adhoc", "2030-01-01").Status)
}

// A process died in its last allowed attempt: the row stays started and
// the message is dead-lettered.
func TestAPICrashedIsDeadLettered(t *testing.T) {
	w := newAPIWorld(t)
	w.attempt(t, "adhoc", "2026-11-04", "poison", "started", attemptOpts{})
	w.dead = []DeadLetter{{Dataset: "adhoc", Partition: "2026-11-04", RunID: "poison", Kind: "crashed"}}
	srv := w.server(t, Deps{})
	require.Equal(t, DeadLettered, partition(t, srv, "adhoc", "2026-11-04").Status)
}

// A range lists every partition from..to, each as the partition endpoint
// answers it.
func TestAPIRange(t *testing.T) {
	w := newAPIWorld(t)
	w.history(t)
	srv := w.server(t, Deps{})
	for ds, want := range wantStatuses {
		a := apiGet(t, srv, "/api/v1/datasets/"+ds+"/partitions?from=2026-11-01&to=2026-11-04")
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		var r rangeJSON
		a.decode(t, &r)
		require.Equal(t, ds, r.Dataset)
		require.Equal(t, []string{"2026-11-01", "2026-11-04"}, []string{r.From, r.To})
		require.True(t, w.now.Equal(r.At))
		require.Len(t, r.Partitions, len(days))
		for i, p := range r.Partitions {
			require.Equal(t, want[i], p.Status, "%s %s", ds, days[i])
			require.Equal(t, partition(t, srv, ds, days[i]), p)
		}
	}
	// Hours, from the short form, canonical in the answer.
	a := apiGet(t, srv, "/api/v1/datasets/clicks/partitions?from=2026-11-05T00&to=2026-11-05T10:00:00Z")
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	var r rangeJSON
	a.decode(t, &r)
	var got []string
	for _, p := range r.Partitions {
		got = append(got, p.Partition+" "+string(p.Status))
	}
	// The hour 09 ended at 10:00 and is due at 11:00; the hour 10 has not ended.
	require.Equal(t, []string{
		"2026-11-05T00:00:00Z late", "2026-11-05T01:00:00Z success", "2026-11-05T02:00:00Z late", "2026-11-05T03:00:00Z late",
		"2026-11-05T04:00:00Z late", "2026-11-05T05:00:00Z late", "2026-11-05T06:00:00Z late", "2026-11-05T07:00:00Z late",
		"2026-11-05T08:00:00Z late", "2026-11-05T09:00:00Z missing", "2026-11-05T10:00:00Z none",
	}, got)
	require.Equal(t, Success, partition(t, srv, "clicks", "2026-11-05T01").Status)
	// A text key, escaped in the path.
	require.Equal(t, Success, partition(t, srv, "notes", "eu/west <b>").Status)
	// The longest range there is.
	a = apiGet(t, srv, "/api/v1/datasets/adhoc/partitions?from=2026-01-01&to="+time.Date(2026, 1, MaxRange, 0, 0, 0, 0, time.UTC).Format(time.DateOnly))
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	a.decode(t, &r)
	require.Len(t, r.Partitions, MaxRange)
}

// The missing endpoint lists the calendar's ended partitions that never
// loaded, each with its status.
func TestAPIMissing(t *testing.T) {
	w := newAPIWorld(t)
	w.history(t)
	srv := w.server(t, Deps{})
	for ds, want := range map[string][]string{
		"orders":    {"2026-11-02 dead_lettered", "2026-11-03 failed", "2026-11-04 running"},
		"customers": {"2026-11-02 rejected", "2026-11-03 late", "2026-11-04 missing"},
	} {
		a := apiGet(t, srv, "/api/v1/datasets/"+ds+"/missing?from=2026-10-01&to=2026-11-30")
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		var m missingJSON
		a.decode(t, &m)
		require.Equal(t, 4, m.Expected, ds)
		require.Equal(t, "2026-10-01", m.From)
		var got []string
		for _, p := range m.Partitions {
			got = append(got, p.Partition+" "+string(p.Status))
			require.Equal(t, partition(t, srv, ds, p.Partition), p)
			require.NotNil(t, p.Due)
		}
		require.Equal(t, want, got, ds)
	}
	// Nothing missing is an empty list.
	a := apiGet(t, srv, "/api/v1/datasets/orders/missing?from=2026-11-01&to=2026-11-01")
	require.Equal(t, http.StatusOK, a.code)
	require.Contains(t, string(a.body), `"partitions":[]`)
	// Hours.
	a = apiGet(t, srv, "/api/v1/datasets/clicks/missing?from=2026-11-05T08&to=2026-11-05T12")
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	var m missingJSON
	a.decode(t, &m)
	require.Equal(t, 2, m.Expected)
	require.Equal(t, []Status{Late, Missing}, []Status{m.Partitions[0].Status, m.Partitions[1].Status})
	// Without a calendar nothing is expected: 422, not an empty list.
	for _, ds := range []string{"revenue", "adhoc"} {
		a := apiGet(t, srv, "/api/v1/datasets/"+ds+"/missing?from=2026-11-01&to=2026-11-04")
		require.Equal(t, http.StatusUnprocessableEntity, a.code)
		require.Contains(t, a.errorText(t), "has no calendar")
	}
}

// The API says what the status page's grid shows, cell by cell.
func TestAPIAgreesWithTheGrid(t *testing.T) {
	w := newAPIWorld(t)
	w.history(t)
	w.dss = w.dss[:4] // the date datasets: one grid of days
	// adhoc is rechecked over 3 days: its load of 11-03 is provisional.
	w.dss[3].Recheck = &calendar.Window{Length: 72 * time.Hour}
	srv := w.server(t, Deps{})
	resp, err := srv.Client().Get(srv.URL + "/?from=2026-11-01&to=2026-11-04")
	require.NoError(t, err)
	html, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	rows := regexp.MustCompile(`<tr data-d="(\w+)">(.*?)</tr>`).FindAllStringSubmatch(string(html), -1)
	require.Len(t, rows, len(w.dss))
	td := regexp.MustCompile(`<td class="(\w+)" data-i="(\d+)">`)
	seen := map[Status]bool{}
	for _, row := range rows {
		a := apiGet(t, srv, "/api/v1/datasets/"+row[1]+"/partitions?from=2026-11-01&to=2026-11-04")
		var r rangeJSON
		a.decode(t, &r)
		cells := td.FindAllStringSubmatch(row[2], -1)
		require.Len(t, cells, len(r.Partitions), row[1])
		for i, c := range cells {
			require.Equal(t, c[1], string(r.Partitions[i].Status), "%s %s", row[1], r.Partitions[i].Partition)
			seen[r.Partitions[i].Status] = true
		}
	}
	require.Len(t, seen, len(Statuses), "every status is compared")
}

func TestAPIBadRequests(t *testing.T) {
	w := newAPIWorld(t)
	srv := w.server(t, Deps{})
	for path, want := range map[string]string{
		"/api/v1/partitions/orders/2026-02-30":                                   `partition: "2026-02-30" is not a calendar date`,
		"/api/v1/partitions/orders/yesterday":                                    `partition: "yesterday" is not a calendar date`,
		"/api/v1/partitions/clicks/2026-11-05T01:30:00Z":                         `partition: "2026-11-05T01:30:00Z" is not an hour`,
		"/api/v1/partitions/notes/" + strings.Repeat("x", 201):                   "partition: has 201 characters; the limit is 200",
		"/api/v1/datasets/orders/partitions?from=2026-11-01":                     "from and to are required",
		"/api/v1/datasets/orders/partitions?from=2026-13-01&to=2026-11-02":       `from: "2026-13-01" is not a calendar date`,
		"/api/v1/datasets/orders/partitions?from=2026-11-01&to=11/02/2026":       `to: "11/02/2026" is not a calendar date`,
		"/api/v1/datasets/orders/partitions?from=2026-11-05&to=2026-11-01":       "to 2026-11-01 is before from 2026-11-05",
		"/api/v1/datasets/orders/partitions?from=2025-01-01&to=2026-11-01":       fmt.Sprintf("holds more than %d partitions", MaxRange),
		"/api/v1/datasets/clicks/partitions?from=2026-11-01T00&to=2026-12-01T00": fmt.Sprintf("holds more than %d partitions", MaxRange),
		"/api/v1/datasets/notes/partitions?from=a&to=b":                          "text partitions",
		"/api/v1/datasets/orders/missing?to=2026-11-01":                          "from and to are required",
		"/api/v1/datasets/orders/missing?from=2026-11-01&to=2026-11-31":          `to: "2026-11-31" is not a calendar date`,
	} {
		a := apiGet(t, srv, path)
		require.Equal(t, http.StatusBadRequest, a.code, "%s: %s", path, a.body)
		require.Contains(t, a.errorText(t), want, path)
	}
	for _, path := range []string{
		"/api/v1/partitions/shipments/2026-11-01",
		"/api/v1/datasets/shipments/partitions?from=2026-11-01&to=2026-11-02",
		"/api/v1/datasets/shipments/missing?from=2026-11-01&to=2026-11-02",
	} {
		a := apiGet(t, srv, path)
		require.Equal(t, http.StatusNotFound, a.code, path)
		require.Equal(t, `dataset "shipments" is not configured`, a.errorText(t))
	}
	for _, path := range []string{"/api/v1/", "/api/v1/partitions/orders", "/api/v1/datasets/orders", "/api/v1/partitions/orders/2026-11-01/x"} {
		a := apiGet(t, srv, path)
		require.Equal(t, http.StatusNotFound, a.code, path)
		require.Contains(t, a.errorText(t), "no such endpoint")
	}
}

// Strings from events and errors come back intact, and escaped on the wire.
func TestAPIEscapesHostileStrings(t *testing.T) {
	w := newAPIWorld(t)
	w.history(t)
	srv := w.server(t, Deps{})
	for _, path := range []string{
		"/api/v1/partitions/orders/2026-11-02",
		"/api/v1/datasets/orders/partitions?from=2026-11-02&to=2026-11-02",
		"/api/v1/datasets/orders/missing?from=2026-11-02&to=2026-11-02",
	} {
		a := apiGet(t, srv, path)
		require.Equal(t, http.StatusOK, a.code)
		raw := string(a.body)
		for _, s := range []string{"<", ">", "&"} {
			require.NotContains(t, raw, s, path)
		}
		require.Contains(t, raw, `\u003cimg src=x onerror=\"window.pwned=2\"\u003e does not exist \u0026 more`)
		require.Contains(t, raw, `\u003cscript\u003ewindow.pwned=1\u003c/script\u003e`)
	}
	p := partition(t, srv, "orders", "2026-11-02")
	require.Equal(t, apiHostileError, *p.Error)
	require.Equal(t, apiHostileRun, *p.RunID)
	require.Equal(t, apiHostileError, *p.Attempts.List[0].Error)

	a := apiGet(t, srv, "/api/v1/partitions/customers/2026-11-02")
	require.NotContains(t, string(a.body), "<")
	var c partitionJSON
	a.decode(t, &c)
	require.Equal(t, apiHostileNote, c.Checks[1].Note)
	require.JSONEq(t, `[{"id":"<b>1</b>"}]`, string(c.Checks[1].Samples))

	// A hostile dataset name in the path, repeated by the error.
	a = apiGet(t, srv, "/api/v1/partitions/"+url.PathEscape(`<img src=x>`)+"/2026-11-01")
	require.Equal(t, http.StatusNotFound, a.code)
	require.NotContains(t, string(a.body), "<")
	require.Equal(t, `dataset "<img src=x>" is not configured`, a.errorText(t))
}

func TestAPIToken(t *testing.T) {
	w := newAPIWorld(t)
	w.history(t)
	const path = "/api/v1/partitions/orders/2026-11-01"

	// Open by default, a token for the actions or not.
	for _, tok := range []string{"", apiToken} {
		require.Equal(t, http.StatusOK, apiGet(t, w.server(t, Deps{Token: tok}), path).code)
	}

	srv := w.server(t, Deps{Token: apiToken, TokenForReads: true})
	for name, header := range map[string][]string{
		"none":       nil,
		"wrong":      {"Authorization", "Bearer " + apiToken + "x"},
		"prefix":     {"Authorization", "Bearer " + apiToken[:len(apiToken)-1]},
		"empty":      {"Authorization", "Bearer "},
		"not bearer": {"Authorization", "Basic " + apiToken},
	} {
		for _, p := range []string{path, "/api/v1/datasets/orders/missing?from=2026-11-01&to=2026-11-02", "/api/v1/nowhere"} {
			a := apiGet(t, srv, p, header...)
			require.Equal(t, http.StatusUnauthorized, a.code, "%s %s", name, p)
			require.True(t, strings.HasPrefix(a.header.Get("WWW-Authenticate"), `Bearer realm="idem"`), name)
			require.NotContains(t, string(a.body), apiToken)
			a.errorText(t)
		}
	}
	a := apiGet(t, srv, path, "Authorization", "Bearer "+apiToken)
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	// The page itself stays open.
	resp, err := srv.Client().Get(srv.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// Reads need a token none was configured for: nothing is answered.
	srv = w.server(t, Deps{TokenForReads: true})
	for _, header := range [][]string{nil, {"Authorization", "Bearer "}} {
		a := apiGet(t, srv, path, header...)
		require.Equal(t, http.StatusUnauthorized, a.code)
		require.Contains(t, a.errorText(t), "http.token is empty")
	}
}

// No CORS: a preflight gets no Access-Control-* header (apiDo checks every
// answer for one), and only GET is answered.
func TestAPINoCORS(t *testing.T) {
	w := newAPIWorld(t)
	srv := w.server(t, Deps{Token: apiToken})
	origin := []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "GET"}
	a := apiDo(t, srv, http.MethodOptions, "/api/v1/partitions/orders/2026-11-01", origin...)
	require.Equal(t, http.StatusMethodNotAllowed, a.code)
	require.Equal(t, "GET, HEAD", a.header.Get("Allow"))
	a.errorText(t)
	a = apiGet(t, srv, "/api/v1/partitions/orders/2026-11-01", origin...)
	require.Equal(t, http.StatusOK, a.code)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		a := apiDo(t, srv, m, "/api/v1/partitions/orders/2026-11-01", "Authorization", "Bearer "+apiToken)
		require.Equal(t, http.StatusMethodNotAllowed, a.code, m)
		require.Contains(t, a.errorText(t), "read-only")
	}
	a = apiDo(t, srv, http.MethodHead, "/api/v1/partitions/orders/2026-11-01")
	require.Equal(t, http.StatusOK, a.code)
}

// attempts.count keeps the attempts retention removed; the list holds the
// newest stored ones, at most MaxListedAttempts.
func TestAPIAttemptsCountSurvivesPruning(t *testing.T) {
	w := newAPIWorld(t)
	const n = MaxListedAttempts + 3
	for i := range n {
		w.attempt(t, "adhoc", "2026-11-04", "r1", "failed", attemptOpts{err: fmt.Errorf("try %d", i+1), kind: audit.KindTransient})
	}
	srv := w.server(t, Deps{})
	p := partition(t, srv, "adhoc", "2026-11-04")
	require.EqualValues(t, n, p.Attempts.Count)
	require.Len(t, p.Attempts.List, MaxListedAttempts)
	require.Equal(t, fmt.Sprintf("try %d", n), *p.Attempts.List[0].Error)

	// Older than idem.retention_floor (7 days), under which nothing is pruned.
	ctx := context.Background()
	_, err := w.db.Exec(ctx, `UPDATE idem.pipeline_audit SET started_at = started_at - interval '8 days',
	                          finished_at = finished_at - interval '8 days'`)
	require.NoError(t, err)
	res, err := audit.Prune(ctx, w.db, audit.PruneOptions{Retention: time.Nanosecond})
	require.NoError(t, err)
	require.EqualValues(t, n-1, res.Deleted)
	p = partition(t, srv, "adhoc", "2026-11-04")
	require.EqualValues(t, n, p.Attempts.Count)
	require.Len(t, p.Attempts.List, 1)
	require.Equal(t, Failed, p.Status)
}

func deref0[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

// The story endpoint answers what internal/why tells from the audit (here
// without NATS, which its notes say), in the documented shape.
func TestAPIStory(t *testing.T) {
	w := newAPIWorld(t)
	w.history(t)
	srv := w.server(t, Deps{Why: func(ctx context.Context, dataset, partition string) (why.Report, error) {
		var ds why.Dataset
		for _, d := range w.dss {
			if d.Name == dataset {
				ds = why.Dataset{Name: d.Name, Upstreams: d.Upstreams, Calendar: d.Calendar, Definition: d.Definition,
					DefinitionJSON: []byte(`{"source":"SELECT 2","strategy":"delete_insert"}`)}
			}
		}
		return why.Tell(ctx, why.Sources{Pipeline: "shop", DB: w.db, Audit: w.db, Now: func() time.Time { return w.now }}, ds, partition)
	}})
	// The load of orders 11-01 widened a column (sync_all_columns).
	ctx := context.Background()
	var id int64
	require.NoError(t, w.db.QueryRow(ctx, `SELECT id FROM idem.pipeline_audit WHERE task_id = 'orders' AND partition_key = '2026-11-01' AND status = 'success'`).Scan(&id))
	require.NoError(t, audit.RecordSchemaChanges(ctx, w.db, id, audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-01", RunID: "r1"},
		[]strategies.SchemaChange{{Column: "amount", Change: strategies.ChangeRetyped, Action: strategies.ActionWidened, OldType: "integer", NewType: "bigint",
			Policy: strategies.OnSchemaChangeSync, DDL: `ALTER TABLE "analytics"."orders" ALTER COLUMN "amount" TYPE bigint`}}))
	for _, c := range []struct{ dataset, key, state string }{
		{"orders", "2026-11-01", why.StateLoaded},
		{"orders", "2026-11-03", why.StateRetrying},
		{"orders", "2026-11-04", why.StateLoading},
		{"customers", "2026-11-02", why.StateRejected},
		{"customers", "2026-11-04", why.StateMissing},
		{"notes", "eu/west <b>", why.StateLoaded},
		{"adhoc", "2026-11-01", why.StateOutdated},
		{"adhoc", "2026-11-03", why.StateLoaded},
	} {
		a := apiGet(t, srv, "/api/v1/datasets/"+url.PathEscape(c.dataset)+"/partitions/"+url.PathEscape(c.key))
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		var r why.Report
		a.decode(t, &r)
		require.Equal(t, c.state, r.Verdict.State, "%s %s: %s", c.dataset, c.key, r.Verdict.Line)
		require.Equal(t, why.Exit(c.state), r.Verdict.Exit)
		require.Equal(t, c.key, r.Partition)
		require.Contains(t, r.Notes, "NATS was not read: no events or dead letters are shown")
		var raw struct {
			SchemaChanges []map[string]any `json:"schema_changes"`
		}
		a.decode(t, &raw)
		require.NotNil(t, raw.SchemaChanges, "an array, never null")
		if c.dataset != "orders" || c.key != "2026-11-01" {
			require.Empty(t, raw.SchemaChanges, "%s %s", c.dataset, c.key)
			continue
		}
		require.Equal(t, []map[string]any{{"audit_id": float64(id), "dataset": "orders", "partition": "2026-11-01", "run_id": "r1",
			"column": "amount", "change": "retyped", "action": "widened", "old_type": "integer", "new_type": "bigint", "policy": "sync_all_columns",
			"ddl": `ALTER TABLE "analytics"."orders" ALTER COLUMN "amount" TYPE bigint`, "at": raw.SchemaChanges[0]["at"]}}, raw.SchemaChanges)
		require.Regexp(t, `^\d{4}-\d\d-\d\dT`, raw.SchemaChanges[0]["at"])
		require.Contains(t, r.Verdict.Line, "; widened column amount from integer to bigint (sync_all_columns); ")
	}
	a := apiGet(t, srv, "/api/v1/datasets/orders/partitions/2026-13-01")
	require.Equal(t, http.StatusBadRequest, a.code)
	a = apiGet(t, srv, "/api/v1/datasets/nope/partitions/2026-11-01")
	require.Equal(t, http.StatusNotFound, a.code)
}

// checkRow is one row of idem.check_results, as the tests read it.
type checkRow struct {
	AuditID                            int64
	Name, Kind, Severity, Status, Note string
	Failing, Checked                   int64
	Threshold, Samples                 string
}

// partitionChecks reads the check outcomes of dataset's partition key from
// the table, newest first: what the API's are compared with.
func partitionChecks(t *testing.T, db *pgxpool.Pool, dataset, key string) []checkRow {
	t.Helper()
	rows, err := db.Query(context.Background(), `
		SELECT audit_id, name, kind, severity, status, coalesce(note, ''), failing, checked, threshold, coalesce(samples::text, '')
		  FROM idem.check_results WHERE dag_id = 'shop' AND task_id = $1 AND partition_key = $2
		 ORDER BY id DESC`, dataset, key)
	require.NoError(t, err)
	var out []checkRow
	var c checkRow
	_, err = pgx.ForEachRow(rows, []any{&c.AuditID, &c.Name, &c.Kind, &c.Severity, &c.Status, &c.Note, &c.Failing, &c.Checked,
		&c.Threshold, &c.Samples}, func() error {
		out = append(out, c)
		return nil
	})
	require.NoError(t, err)
	return out
}
