package statuspage

// The operator's actions: POST /actions/replay, /actions/backfill and
// /actions/reload. Each needs the operator token and a name (who), takes a
// reason (required for a reload, which the page always asks for), is
// recorded in idem.operator_actions before it is done, and its outcome
// after. A form post is sent back to a page with the outcome; a request
// that accepts application/json (the page's script) gets the outcome as
// JSON and follows the partition itself.

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
)

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
	if who == "" || len(who) > maxWho || !printable(who) {
		http.Error(w, fmt.Sprintf("say who asks: 1-%d printable characters in who", maxWho), http.StatusBadRequest)
		return "", false
	}
	return who, true
}

// reasonOf reads why the operator acts, or answers 400. An empty reason is
// refused when required.
func reasonOf(w http.ResponseWriter, r *http.Request, required bool) (string, bool) {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if (required && reason == "") || utf8.RuneCountInString(reason) > maxReason || !printable(reason) {
		http.Error(w, fmt.Sprintf("say why: 1-%d printable characters in reason", maxReason), http.StatusBadRequest)
		return "", false
	}
	return reason, true
}

func printable(s string) bool {
	return strings.IndexFunc(s, func(c rune) bool { return !unicode.IsPrint(c) }) < 0
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
	reason, ok := reasonOf(w, r, false)
	if !ok {
		return
	}
	detail := map[string]any{"seq": seq}
	// The partition as the stream says, not as the form does: the story
	// of the partition lists the action by these.
	if dead, err := p.d.DeadLetters(r.Context()); err == nil {
		for _, d := range dead {
			if d.Seq == seq {
				detail["dataset"], detail["partition"] = d.Dataset, d.Partition
			}
		}
	}
	withReason(detail, reason)
	p.act(w, r, who, audit.ActionReplay, detail, "/dead-letters", func(ctx context.Context) (string, error) {
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
	reason, ok := reasonOf(w, r, false)
	if !ok {
		return
	}
	detail := map[string]any{"dataset": ds, "from": from, "to": to}
	withReason(detail, reason)
	p.act(w, r, who, audit.ActionBackfill, detail, "/", func(ctx context.Context) (string, error) {
		return p.d.Backfill(ctx, ds, from, to)
	})
}

// reload asks for a forced run of one partition of a configured dataset.
func (p *Page) reload(w http.ResponseWriter, r *http.Request) {
	who, ds, key, ok := p.partitionTarget(w, r)
	if !ok {
		return
	}
	reason, ok := reasonOf(w, r, true)
	if !ok {
		return
	}
	if p.d.Reload == nil {
		http.Error(w, "this idem cannot reload a partition", http.StatusServiceUnavailable)
		return
	}
	detail := map[string]any{"dataset": ds.Name, "partition": key.Key, "reason": reason}
	p.act(w, r, who, audit.ActionReload, detail, "/", func(ctx context.Context) (string, error) {
		return p.d.Reload(ctx, ds.Name, key.Key, who, reason)
	})
}

func withReason(detail map[string]any, reason string) {
	if reason != "" {
		detail["reason"] = reason
	}
}

// dataset finds a configured dataset by name.
func (p *Page) dataset(name string) (Dataset, bool) {
	for _, ds := range p.d.Datasets() {
		if ds.Name == name {
			return ds, true
		}
	}
	return Dataset{}, false
}

// actionJSON is an action's answer to the page's script.
type actionJSON struct {
	ID      int64  `json:"id"`
	Action  string `json:"action"`
	Outcome string `json:"outcome"`
	// OK: it was done; the outcome says what it did, or why not.
	OK bool `json:"ok"`
}

// act records the action, does it, records the outcome, and sends the
// browser back with the outcome, or answers it as JSON when asked to (an
// action that failed answers 502: what it acts on, NATS or the audit,
// refused).
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
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		code := http.StatusOK
		if err != nil {
			code = http.StatusBadGateway
		}
		writeJSON(w, code, actionJSON{ID: id, Action: action, Outcome: out, OK: err == nil})
		return
	}
	http.Redirect(w, r, back+"?msg="+urlQueryEscape(action+": "+out), http.StatusSeeOther)
}

// datasetTarget authorizes an action and finds the configured dataset its
// form names; false when it has answered the request itself.
func (p *Page) datasetTarget(w http.ResponseWriter, r *http.Request) (string, Dataset, bool) {
	who, ok := p.authorize(w, r)
	if !ok {
		return "", Dataset{}, false
	}
	ds, ok := p.dataset(r.PostForm.Get("dataset"))
	if !ok {
		http.Error(w, fmt.Sprintf("dataset %q is not configured", clip(r.PostForm.Get("dataset"))), http.StatusNotFound)
		return "", Dataset{}, false
	}
	return who, ds, true
}

// partitionTarget is datasetTarget and the partition the form names.
func (p *Page) partitionTarget(w http.ResponseWriter, r *http.Request) (string, Dataset, schemas.Partition, bool) {
	who, ds, ok := p.datasetTarget(w, r)
	if !ok {
		return "", Dataset{}, schemas.Partition{}, false
	}
	key, err := parseKey(ds, "partition", r.PostForm.Get("partition"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return "", Dataset{}, schemas.Partition{}, false
	}
	return who, ds, key, true
}
