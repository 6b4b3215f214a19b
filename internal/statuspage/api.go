package statuspage

// The JSON API under /api/v1/: read-only, on the page's address, with the
// grid's statuses (cells decides both). docs/api/openapi.yaml describes
// every path and answer; api_test.go checks the real answers against it.

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
)

// Bounds of the API's answers.
const (
	// MaxRange is the most partitions a range (?from=&to=, inclusive) may
	// hold: 400 days of a date dataset, 400 hours of a timestamp one.
	MaxRange = 400
	// MaxListedAttempts is how many attempts each partition lists, newest
	// first; attempts.count counts them all.
	MaxListedAttempts = 20
)

// apiRoutes are the API's endpoints, method and path as
// docs/api/openapi.yaml names them.
func (p *Page) apiRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /api/v1/partitions/{dataset}/{partition}":          p.apiPartition,
		"GET /api/v1/datasets/{dataset}/partitions":             p.apiPartitions,
		"GET /api/v1/datasets/{dataset}/missing":                p.apiMissing,
		"GET /api/v1/datasets/{dataset}/partitions/{partition}": p.apiStory,
	}
}

// api serves /api/v1/, the token first when reads need it.
func (p *Page) api() http.Handler { return p.readToken(p.apiMux()) }

// apiMux routes /api/v1/. Every answer is JSON, errors included; nothing
// answers a cross-origin preflight (no Access-Control-* header is ever
// set), so a browser on another origin cannot read it.
func (p *Page) apiMux() *http.ServeMux {
	mux := http.NewServeMux()
	for pattern, h := range p.apiRoutes() {
		mux.HandleFunc(pattern, h)
	}
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			apiError(w, http.StatusMethodNotAllowed, "%s is not allowed: the API is read-only (GET)", clip(r.Method))
			return
		}
		apiError(w, http.StatusNotFound, "no such endpoint: see docs/api/openapi.yaml")
	})
	return mux
}

// readToken asks for the operator token when reads need it. An API that
// needs a token none was configured for refuses everything.
func (p *Page) readToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.d.TokenForReads {
			h.ServeHTTP(w, r)
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case p.d.Token == "":
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem"`)
			apiError(w, http.StatusUnauthorized, "http.token_for_reads is set but http.token is empty: no request can be authorized")
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem"`)
			apiError(w, http.StatusUnauthorized, "this API needs the operator token: send Authorization: Bearer <http.token>")
		case subtle.ConstantTimeCompare([]byte(tok), []byte(p.d.Token)) != 1:
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem", error="invalid_token"`)
			apiError(w, http.StatusUnauthorized, "wrong operator token")
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// partitionJSON is one partition as the API answers it.
type partitionJSON struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	Status    Status `json:"status"`
	// RunID, Rows, Error, ErrorKind and FinishedAt are the latest attempt's
	// (skipped duplicates aside); Rows only when it loaded.
	RunID      *string    `json:"run_id"`
	Rows       *rowsJSON  `json:"rows"`
	Error      *string    `json:"error"`
	ErrorKind  *string    `json:"error_kind"`
	FinishedAt *time.Time `json:"finished_at"`
	// Due is when the calendar expects the partition, once its period ended.
	Due      *time.Time   `json:"due"`
	Attempts attemptsJSON `json:"attempts"`
	Checks   []checkJSON  `json:"checks"` // the latest attempt's
}

// rowsJSON, attemptJSON and checkJSON are the audit's rows as the API
// answers them (docs/api/openapi.yaml): what a load wrote (Deleted is null
// when not counted: a TRUNCATE does not count what it removed), one attempt
// with the audit's status (started, success or failed), one check's
// outcome.
type (
	rowsJSON    = audit.RangeRows
	attemptJSON = audit.RangeAttempt
	checkJSON   = audit.CheckOutcome
)

// attemptsJSON counts a partition's attempts (those retention removed
// included, skipped duplicates not) and lists the newest stored ones.
type attemptsJSON struct {
	Count int64         `json:"count"`
	List  []attemptJSON `json:"list"`
}

// spanJSON is what every answer about a range of one dataset's partitions
// starts with: the dataset, the range (inclusive) and when it was read.
type spanJSON struct {
	Dataset string `json:"dataset"`
	// Paused is the dataset's pause in force (`idem pause`), nil when none.
	Paused *audit.Pause `json:"paused"`
	From   string       `json:"from"`
	To     string       `json:"to"`
	At     time.Time    `json:"at"`
}

// rangeJSON is a range of one dataset's partitions, oldest first.
type rangeJSON struct {
	spanJSON
	Partitions []partitionJSON `json:"partitions"`
}

// missingJSON is a calendar's expected partitions without a successful
// load, oldest first.
type missingJSON struct {
	spanJSON
	// Expected counts the partitions of from..to whose period has ended.
	Expected   int             `json:"expected"`
	Partitions []partitionJSON `json:"partitions"`
}

type errorJSON struct {
	Error string `json:"error"`
}

func (p *Page) apiPartition(w http.ResponseWriter, r *http.Request) {
	dss, ds, key, ok := p.apiPartitionOf(w, r)
	if !ok {
		return
	}
	ps, err := p.read(r.Context(), dss, ds, []string{key.Key})
	if err != nil {
		p.apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ps[0])
}

// apiStory answers a partition's whole story and its verdict, as
// `idem audit why` prints it.
func (p *Page) apiStory(w http.ResponseWriter, r *http.Request) {
	_, ds, key, ok := p.apiPartitionOf(w, r)
	if !ok {
		return
	}
	if p.d.Why == nil {
		apiError(w, http.StatusServiceUnavailable, "this idem tells no stories")
		return
	}
	st, err := p.d.Why(r.Context(), ds.Name, key.Key)
	if err != nil {
		p.apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (p *Page) apiPartitions(w http.ResponseWriter, r *http.Request) {
	dss, ds, ok := p.apiDataset(w, r)
	if !ok {
		return
	}
	keys, ok := rangeOf(w, r, ds)
	if !ok {
		return
	}
	ps, err := p.read(r.Context(), dss, ds, keys)
	if err != nil {
		p.apiFail(w, err)
		return
	}
	paused, err := audit.PauseOf(r.Context(), p.d.DB, p.d.Pipeline, ds.Name)
	if err != nil {
		p.apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rangeJSON{spanJSON: spanJSON{Dataset: ds.Name, Paused: paused, From: keys[0], To: keys[len(keys)-1], At: p.d.Now().UTC()}, Partitions: ps})
}

func (p *Page) apiMissing(w http.ResponseWriter, r *http.Request) {
	dss, ds, ok := p.apiDataset(w, r)
	if !ok {
		return
	}
	if ds.Calendar == nil {
		apiError(w, http.StatusUnprocessableEntity, "dataset %q has no calendar (expect: in its config): it expects no partition, so none is missing; "+
			"its partitions are at /api/v1/datasets/{dataset}/partitions", ds.Name)
		return
	}
	keys, ok := rangeOf(w, r, ds)
	if !ok {
		return
	}
	ctx, now := r.Context(), p.d.Now()
	from, to := keys[0], keys[len(keys)-1]
	ended := ds.Calendar.Ended(now, from, to)
	paused, err := audit.PauseOf(ctx, p.d.DB, p.d.Pipeline, ds.Name)
	if err != nil {
		p.apiFail(w, err)
		return
	}
	out := missingJSON{spanJSON: spanJSON{Dataset: ds.Name, Paused: paused, From: from, To: to, At: now.UTC()}, Expected: len(ended), Partitions: []partitionJSON{}}
	if len(ended) > 0 {
		// What `idem audit missing` and the metrics count: no successful load.
		loaded, err := audit.LoadedPartitions(ctx, p.d.DB, p.d.Pipeline, ds.Name, ended[0].Key, ended[len(ended)-1].Key)
		if err != nil {
			p.apiFail(w, err)
			return
		}
		var gaps []string
		for _, g := range ds.Calendar.Gaps(now, from, to, func(k string) bool { return loaded[k] }) {
			gaps = append(gaps, g.Key)
		}
		if len(gaps) > 0 {
			if out.Partitions, err = p.read(ctx, dss, ds, gaps); err != nil {
				p.apiFail(w, err)
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// apiDataset finds the path's dataset among the configured ones, or
// answers 404.
func (p *Page) apiDataset(w http.ResponseWriter, r *http.Request) ([]Dataset, Dataset, bool) {
	name := r.PathValue("dataset")
	dss := p.d.Datasets()
	for _, ds := range dss {
		if ds.Name == name {
			return dss, ds, true
		}
	}
	apiError(w, http.StatusNotFound, "dataset %q is not configured", clip(name))
	return nil, Dataset{}, false
}

// apiPartitionOf finds the path's dataset and parses its partition, or
// answers 404 or 400.
func (p *Page) apiPartitionOf(w http.ResponseWriter, r *http.Request) ([]Dataset, Dataset, schemas.Partition, bool) {
	dss, ds, ok := p.apiDataset(w, r)
	if !ok {
		return nil, Dataset{}, schemas.Partition{}, false
	}
	key, err := parseKey(ds, "partition", r.PathValue("partition"))
	if err != nil {
		apiError(w, http.StatusBadRequest, "%s", err)
		return nil, Dataset{}, schemas.Partition{}, false
	}
	return dss, ds, key, true
}

// rangeOf reads ?from=&to= as partitions of ds and lists the range's
// keys, or answers 400 with the reason.
func rangeOf(w http.ResponseWriter, r *http.Request, ds Dataset) ([]string, bool) {
	q := r.URL.Query()
	if q.Get("from") == "" || q.Get("to") == "" {
		apiError(w, http.StatusBadRequest, "from and to are required, e.g. ?from=2026-11-01&to=2026-11-30")
		return nil, false
	}
	from, err := parseKey(ds, "from", q.Get("from"))
	if err == nil {
		var to schemas.Partition
		if to, err = parseKey(ds, "to", q.Get("to")); err == nil {
			var keys []string
			if keys, err = rangeKeys(ds, from, to); err == nil {
				return keys, true
			}
		}
	}
	apiError(w, http.StatusBadRequest, "%s", err)
	return nil, false
}

// parseKey parses a partition key of ds as an event's would be.
func parseKey(ds Dataset, field, s string) (schemas.Partition, error) {
	k, err := schemas.ParsePartition(partitionType(ds), s)
	if err != nil {
		var ie *schemas.InvalidEventError
		if errors.As(err, &ie) {
			return k, fmt.Errorf("%s: %s", field, ie.Reason)
		}
		return k, fmt.Errorf("%s: %w", field, err)
	}
	return k, nil
}

func partitionType(ds Dataset) schemas.PartitionType {
	if ds.PartitionType == "" {
		return schemas.PartitionDate
	}
	return ds.PartitionType
}

// rangeKeys lists every partition from..to, at most MaxRange.
func rangeKeys(ds Dataset, from, to schemas.Partition) ([]string, error) {
	var step func(time.Time) time.Time
	layout := ""
	switch partitionType(ds) {
	case schemas.PartitionDate:
		step, layout = func(t time.Time) time.Time { return t.AddDate(0, 0, 1) }, time.DateOnly
	case schemas.PartitionHour:
		step, layout = func(t time.Time) time.Time { return t.Add(time.Hour) }, "2006-01-02T15:04:05Z"
	default:
		return nil, fmt.Errorf("dataset %q has %s partitions, which have no order to range over; ask for each at /api/v1/partitions/{dataset}/{partition}",
			ds.Name, partitionType(ds))
	}
	if to.Time.Before(from.Time) {
		return nil, fmt.Errorf("to %s is before from %s", to.Key, from.Key)
	}
	var keys []string
	for t := from.Time; !t.After(to.Time); t = step(t) {
		if len(keys) == MaxRange {
			return nil, fmt.Errorf("from %s to %s holds more than %d partitions; ask for a shorter range", from.Key, to.Key, MaxRange)
		}
		keys = append(keys, t.UTC().Format(layout))
	}
	return keys, nil
}

// read answers for ds's partitions keys (sorted). The audit is read in one
// snapshot, so a partition's status, its latest attempt and its checks
// agree; the dead letters come from the stream, as for the grid.
func (p *Page) read(ctx context.Context, dss []Dataset, ds Dataset, keys []string) ([]partitionJSON, error) {
	from, to := keys[0], keys[len(keys)-1]
	var (
		latest []audit.Latest
		waits  []audit.Wait
		stored map[string]audit.StoredAttempts
		checks map[int64][]checkJSON
	)
	err := snapshot(ctx, p.d.DB, func(q audit.Querier) error {
		var err error
		if latest, err = audit.LatestInRange(ctx, q, p.d.Pipeline, append([]string{ds.Name}, ds.Upstreams...), from, to); err != nil {
			return err
		}
		if waits, err = audit.WaitsInRange(ctx, q, p.d.Pipeline, []string{ds.Name}, from, to, len(keys)); err != nil {
			return err
		}
		if stored, err = audit.AttemptsInRange(ctx, q, p.d.Pipeline, ds.Name, from, to, MaxListedAttempts); err != nil {
			return err
		}
		var ids []int64
		for _, k := range keys {
			if s, ok := stored[k]; ok {
				ids = append(ids, s.ID)
			}
		}
		checks, err = audit.ChecksOf(ctx, q, ids)
		return err
	})
	if err != nil {
		return nil, err
	}
	dead, err := p.d.DeadLetters(ctx)
	if err != nil {
		p.d.Log.Warn().Err(err).Msg("api: dead letters not readable")
	}
	c := newCells(p.d.Now(), dss, from, to, latest, waits, dead)
	out := make([]partitionJSON, len(keys))
	for i, k := range keys {
		a := partitionJSON{Dataset: ds.Name, Partition: k, Status: c.status(ds, k), Checks: []checkJSON{}, Attempts: attemptsJSON{List: []attemptJSON{}}}
		if s, ok := c.slot(ds, k); ok {
			due := s.Due.UTC()
			a.Due = &due
		}
		if s, ok := stored[k]; ok {
			l := s.List[0]
			a.RunID, a.Error, a.ErrorKind, a.FinishedAt = &l.RunID, l.Error, l.ErrorKind, l.FinishedAt
			if l.Status == audit.StatusSuccess {
				a.Rows = &s.Rows
			}
			a.Attempts = attemptsJSON{Count: s.Count, List: s.List}
			if cs := checks[s.ID]; cs != nil {
				a.Checks = cs
			}
		}
		out[i] = a
	}
	return out, nil
}

func (p *Page) apiFail(w http.ResponseWriter, err error) {
	p.d.Log.Warn().Err(err).Msg("api")
	apiError(w, http.StatusServiceUnavailable, "the audit could not be read: %s", err)
}

func apiError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, errorJSON{Error: fmt.Sprintf(format, args...)})
}

// writeJSON answers v. encoding/json escapes <, > and & in every string, so
// a hostile run_id or error stays inert even in a page that embeds it.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// clip bounds a string from the request that an error repeats.
func clip(s string) string {
	const n = 64
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
