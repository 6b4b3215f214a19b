// Package statuspage owns the operator's status page that `idem serve`
// serves on its HTTP address: a grid of datasets × partitions coloured by
// status, a partition's attempts, the dead letters, a health strip, and,
// only when an operator token is configured, two actions (replay a dead
// letter; backfill a dataset's missing and failed partitions), each recorded
// in the audit with who asked. It is server-rendered with html/template
// (every string from events and errors is escaped) and embedded assets; the
// only script is a small hand-written one that opens a cell's attempts.
//
// Under /api/v1/ the same statuses are served as read-only JSON (api.go),
// described by docs/api/openapi.yaml. Neither the page nor the API writes
// to the audit, except to record an operator's action.
package statuspage

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

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
	// and failed partitions of a dataset's range. Each returns what it did.
	Replay   func(ctx context.Context, seq uint64) (string, error)
	Backfill func(ctx context.Context, dataset, from, to string) (string, error)
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
		"age":     func(t time.Time) string { return age(d.Now().Sub(t)) },
		"dur":     func(x time.Duration) string { return x.Round(time.Millisecond).String() },
		"derefI":  func(p *int64) string { return deref(p) },
		"short":   shortKey,
		"every":   func(n, i int) bool { return n <= 40 || i%((n+39)/40) == 0 },
		"actions": func() bool { return d.Token != "" },
	}).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	return &Page{d: d, tmpl: t}, nil
}

// Handler routes the page's paths: / (the grid), /partition (a cell's
// attempts, a fragment), /dead-letters, /actions/replay, /actions/backfill,
// /assets/, and the JSON API under /api/v1/.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.grid)
	mux.HandleFunc("GET /partition", p.partition)
	mux.HandleFunc("GET /dead-letters", p.deadLetters)
	mux.HandleFunc("POST /actions/replay", p.replay)
	mux.HandleFunc("POST /actions/backfill", p.backfill)
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
	keys := columns(now, dss, recent, from, to, n)
	var latest []audit.Latest
	if len(keys) > 0 {
		if latest, err = audit.LatestInRange(ctx, p.d.DB, p.d.Pipeline, names, keys[0], keys[len(keys)-1]); err != nil {
			p.fail(w, err)
			return
		}
	}
	dead, err := p.d.DeadLetters(ctx)
	if err != nil {
		p.d.Log.Warn().Err(err).Msg("status page: dead letters not readable")
	}
	v := gridView{
		Pipeline: p.d.Pipeline, Health: p.d.Health(ctx), Grid: build(now, dss, keys, latest, dead), Legend: Statuses,
		From: from, To: to, N: n, Datasets: names, Message: q.Get("msg"), Now: now,
	}
	v.Rendered = time.Since(start)
	p.render(w, "grid.html", v)
}

type partitionView struct {
	Dataset, Partition string
	Attempts           []audit.PartitionAttempt
	Checks             []audit.CheckRow
	DeadLetters        []DeadLetter
}

func (p *Page) partition(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := partitionView{Dataset: q.Get("dataset"), Partition: q.Get("partition")}
	if v.Dataset == "" || v.Partition == "" || len(v.Dataset) > 200 || len(v.Partition) > 200 {
		http.Error(w, "want ?dataset=...&partition=...", http.StatusBadRequest)
		return
	}
	var err error
	if v.Attempts, err = audit.PartitionAttempts(r.Context(), p.d.DB, p.d.Pipeline, v.Dataset, v.Partition, 50); err != nil {
		p.fail(w, err)
		return
	}
	if v.Checks, err = audit.PartitionChecks(r.Context(), p.d.DB, p.d.Pipeline, v.Dataset, v.Partition, 50); err != nil {
		p.fail(w, err)
		return
	}
	dead, _ := p.d.DeadLetters(r.Context())
	for _, d := range dead {
		if d.Dataset == v.Dataset && d.Partition == v.Partition {
			v.DeadLetters = append(v.DeadLetters, d)
		}
	}
	p.render(w, "partition.html", v)
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

// authorize checks the operator token and the name of who asks. It answers
// 403 itself when the actions are disabled or the token is wrong.
func (p *Page) authorize(w http.ResponseWriter, r *http.Request) (string, bool) {
	if p.d.Token == "" {
		http.Error(w, "actions are disabled: this idem has no operator token (http.token)", http.StatusForbidden)
		return "", false
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return "", false
	}
	tok := r.PostForm.Get("token")
	if h, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		tok = h
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(p.d.Token)) != 1 {
		http.Error(w, "wrong operator token", http.StatusForbidden)
		return "", false
	}
	who := strings.TrimSpace(r.PostForm.Get("who"))
	if who == "" || len(who) > maxWho || strings.IndexFunc(who, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 {
		http.Error(w, fmt.Sprintf("say who asks: 1-%d printable characters in who", maxWho), http.StatusBadRequest)
		return "", false
	}
	return who, true
}

func (p *Page) replay(w http.ResponseWriter, r *http.Request) {
	who, ok := p.authorize(w, r)
	if !ok {
		return
	}
	seq, err := strconv.ParseUint(r.PostForm.Get("seq"), 10, 64)
	if err != nil || seq == 0 {
		http.Error(w, "seq: want the dead letter's stream sequence", http.StatusBadRequest)
		return
	}
	p.act(w, r, who, audit.ActionReplay, map[string]any{"seq": seq}, "/dead-letters", func(ctx context.Context) (string, error) {
		return p.d.Replay(ctx, seq)
	})
}

func (p *Page) backfill(w http.ResponseWriter, r *http.Request) {
	who, ok := p.authorize(w, r)
	if !ok {
		return
	}
	ds, from, to := r.PostForm.Get("dataset"), cleanKey(r.PostForm.Get("from")), cleanKey(r.PostForm.Get("to"))
	known := false
	for _, d := range p.d.Datasets() {
		known = known || d.Name == ds
	}
	if !known || from == "" || to == "" {
		http.Error(w, "want a configured dataset, from and to", http.StatusBadRequest)
		return
	}
	p.act(w, r, who, audit.ActionBackfill, map[string]any{"dataset": ds, "from": from, "to": to}, "/", func(ctx context.Context) (string, error) {
		return p.d.Backfill(ctx, ds, from, to)
	})
}

// act records the action, does it, records the outcome, and sends the
// browser back with the outcome.
func (p *Page) act(w http.ResponseWriter, r *http.Request, who, action string, detail map[string]any, back string, do func(context.Context) (string, error)) {
	ctx := r.Context()
	id, err := audit.RecordAction(ctx, p.d.DB, p.d.Pipeline, action, who, r.RemoteAddr, detail)
	if err != nil {
		p.fail(w, err)
		return
	}
	out, err := do(ctx)
	if err != nil {
		out = "failed: " + err.Error()
	}
	if ferr := audit.FinishAction(context.WithoutCancel(ctx), p.d.DB, id, out); ferr != nil {
		p.d.Log.Warn().Err(ferr).Int64("action", id).Msg("status page: action outcome not recorded")
	}
	p.d.Log.Info().Str("action", action).Str("requested_by", who).Interface("detail", detail).Str("outcome", out).Msg("operator action")
	http.Redirect(w, r, back+"?msg="+urlQueryEscape(action+": "+out), http.StatusSeeOther)
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
