// Package statuspage owns the operator's status page that `idem serve`
// serves on its HTTP address: a grid of datasets × partitions coloured by
// status, a partition's story and verdict (internal/why), the dead letters,
// a health strip, and, only when an operator token is configured, three
// actions (replay a dead letter; reload a partition, a forced run;
// backfill a dataset's missing and failed partitions), each confirmed with
// a reason and recorded in the audit with who asked. It is server-rendered
// with html/template (every string from events and errors is escaped) and
// embedded assets; the only script is a small hand-written one that opens
// a cell's story, posts an action and follows the partition until its
// verdict is final.
//
// Under /api/v1/ the same statuses are served as read-only JSON (api.go),
// described by docs/api/openapi.yaml. Neither the page nor the API writes
// to the audit, except to record an operator's action.
package statuspage

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/why"
)

//go:embed assets
var assets embed.FS

// DeadLetter is one message of the dead-letter stream, as the page shows it.
type DeadLetter struct {
	Seq       uint64
	Time      time.Time
	Dataset   string
	Partition string
	RunID     string
	Kind      string
	Reason    string
	Subject   string // where it was first published
}

// Health is the strip at the top of every page.
type Health struct {
	WarehouseUp     bool
	WarehouseReason string
	NATS            string // CONNECTED, RECONNECTING, ...
	Pending         uint64 // events not yet delivered
	AckPending      uint64 // delivered, not yet acknowledged
	Replicas        []Replica
	ConfigVersion   string
	// Postgres says what stands in front of PostgreSQL (a pooler, in
	// which mode) and how statements are sent, as found at start.
	Postgres string
	// Reverified says when the recent events were last checked against
	// the warehouse (after a failover or a reconnect); empty before.
	Reverified string
}

// Replica is a live idem process of the fleet.
type Replica struct{ Name, Version string }

// Deps is what the page reads and, with a token, what it may do.
type Deps struct {
	Pipeline string
	DB       audit.Querier
	// Datasets lists the configured datasets (it follows a reload).
	Datasets func() []Dataset
	Health   func(ctx context.Context) Health
	// DeadLetters lists the dead-letter stream, oldest first.
	DeadLetters func(ctx context.Context) ([]DeadLetter, error)
	// Replay republishes one dead letter; Backfill publishes the missing
	// and failed partitions of a dataset's range; Reload publishes a forced
	// event of one partition (a run of its own, which no earlier success
	// skips), saying who asked and why. Each returns what it did.
	Replay   func(ctx context.Context, seq uint64) (string, error)
	Backfill func(ctx context.Context, dataset, from, to string) (string, error)
	Reload   func(ctx context.Context, dataset, partition, who, reason string) (string, error)
	// Versions restores (restore true) or retracts a partition, records
	// the action itself and returns its id and what it did; nil: the
	// page offers neither.
	Versions func(ctx context.Context, restore bool, r VersionRequest) (int64, string, error)
	// Why tells a partition's story (internal/why).
	Why func(ctx context.Context, dataset, partition string) (why.Report, error)
	// Token enables the actions; empty means read-only.
	Token string
	// TokenForReads requires Token (Authorization: Bearer) for every
	// request to the JSON API too; with no Token, the API refuses all.
	TokenForReads bool
	Now           func() time.Time
	Log           zerolog.Logger
}

// Defaults of the grid.
const (
	// DefaultColumns is how many partitions the grid shows unless asked.
	DefaultColumns = 31
	// MaxColumns bounds ?n=.
	MaxColumns = 400
	// recentScan bounds how many recent attempts the grid reads to find the
	// partitions of datasets without a calendar.
	recentScan = 20000
	maxWho     = 100
	// maxReason bounds the reason an operator gives for an action, in
	// characters: it travels in the reload's event, whose attributes are
	// bounded too.
	maxReason = 500
)

// Page serves the status page.
type Page struct {
	d    Deps
	tmpl *template.Template
}

// New parses the templates.
func New(d Deps) (*Page, error) {
	if d.Now == nil {
		d.Now = time.Now
	}
	t, err := template.New("").Funcs(template.FuncMap{
		"age":       func(t time.Time) string { return age(d.Now().Sub(t)) },
		"dur":       func(x time.Duration) string { return x.Round(time.Millisecond).String() },
		"derefI":    func(p *int64) string { return deref(p) },
		"ts":        stamp,
		"tsp":       func(t *time.Time) string { return stampOf(t) },
		"short":     shortKey,
		"every":     func(n, i int) bool { return n <= 40 || i%((n+39)/40) == 0 },
		"actions":   func() bool { return d.Token != "" },
		"pauseLine": pauseLine,
		"maxWho":    func() int { return maxWho },
		"maxReason": func() int { return maxReason },
	}).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	return &Page{d: d, tmpl: t}, nil
}

// Handler routes the page's paths: / (the grid), /partition (a cell's
// story, a fragment), /dead-letters, /actions/replay, /actions/backfill,
// /actions/reload, /assets/, and the JSON API under /api/v1/.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.grid)
	mux.HandleFunc("GET /partition", p.partition)
	mux.HandleFunc("GET /dead-letters", p.deadLetters)
	mux.HandleFunc("POST /actions/replay", p.replay)
	mux.HandleFunc("POST /actions/backfill", p.backfill)
	mux.HandleFunc("POST /actions/reload", p.reload)
	mux.HandleFunc("POST /actions/pause", p.pause)
	mux.HandleFunc("POST /actions/resume", p.resume)
	mux.HandleFunc("POST /actions/restore", p.restore)
	mux.HandleFunc("POST /actions/retract", p.retract)
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.Handle("/api/v1/", p.api())
	return securityHeaders(mux)
}

// securityHeaders: no inline script runs, nothing is framed, types are not
// sniffed; a hostile string that escaped the templates still could not run.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

type gridView struct {
	Pipeline string
	Health   Health
	Grid     Grid
	Legend   []Status
	From, To string
	N        int
	Datasets []string
	// Paused are the pauses in force, by dataset.
	Paused   map[string]audit.Pause
	Message  string
	Rendered time.Duration
	Now      time.Time
}

func (p *Page) grid(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	q := r.URL.Query()
	n := DefaultColumns
	if v, err := strconv.Atoi(q.Get("n")); err == nil && v > 0 {
		n = min(v, MaxColumns)
	}
	from, to := cleanKey(q.Get("from")), cleanKey(q.Get("to"))
	now := p.d.Now()
	dss := p.d.Datasets()
	names := make([]string, len(dss))
	for i, ds := range dss {
		names[i] = ds.Name
	}
	recent, err := audit.RecentPartitions(ctx, p.d.DB, p.d.Pipeline, names, n, recentScan)
	if err != nil {
		p.fail(w, err)
		return
	}
	// Partitions waiting for their source have no attempt yet: they are
	// columns too.
	waits, err := audit.WaitsInRange(ctx, p.d.DB, p.d.Pipeline, names, from, to, n)
	if err != nil {
		p.fail(w, err)
		return
	}
	for _, w := range waits {
		recent = append(recent, w.Partition)
	}
	keys := columns(now, dss, recent, from, to, n)
	var latest []audit.Latest
	if len(keys) > 0 {
		if latest, err = audit.LatestInRange(ctx, p.d.DB, p.d.Pipeline, names, keys[0], keys[len(keys)-1]); err != nil {
			p.fail(w, err)
			return
		}
	}
	paused, err := audit.PausesInForce(ctx, p.d.DB, p.d.Pipeline)
	if err != nil {
		p.fail(w, err)
		return
	}
	dead, err := p.d.DeadLetters(ctx)
	if err != nil {
		p.d.Log.Warn().Err(err).Msg("status page: dead letters not readable")
	}
	v := gridView{Paused: paused,
		Pipeline: p.d.Pipeline, Health: p.d.Health(ctx), Grid: build(now, dss, keys, latest, waits, dead), Legend: Statuses,
		From: from, To: to, N: n, Datasets: names, Message: q.Get("msg"), Now: now,
	}
	v.Rendered = time.Since(start)
	p.render(w, "grid.html", v)
}

type dlqView struct {
	Pipeline    string
	Health      Health
	DeadLetters []DeadLetter
	Actions     []audit.Action
	Error       string
	Message     string
}

func (p *Page) deadLetters(w http.ResponseWriter, r *http.Request) {
	v := dlqView{Pipeline: p.d.Pipeline, Health: p.d.Health(r.Context()), Message: r.URL.Query().Get("msg")}
	dead, err := p.d.DeadLetters(r.Context())
	if err != nil {
		v.Error = err.Error()
	}
	// Newest first.
	for i := len(dead) - 1; i >= 0; i-- {
		v.DeadLetters = append(v.DeadLetters, dead[i])
	}
	if v.Actions, err = audit.RecentActions(r.Context(), p.d.DB, p.d.Pipeline, 20); err != nil {
		v.Error = err.Error()
	}
	p.render(w, "deadletters.html", v)
}

func (p *Page) render(w http.ResponseWriter, name string, v any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := p.tmpl.ExecuteTemplate(w, name, v); err != nil && !errors.Is(err, context.Canceled) {
		p.d.Log.Warn().Err(err).Str("template", name).Msg("status page: render")
	}
}

func (p *Page) fail(w http.ResponseWriter, err error) {
	p.d.Log.Warn().Err(err).Msg("status page")
	http.Error(w, "the audit could not be read: "+err.Error(), http.StatusServiceUnavailable)
}
