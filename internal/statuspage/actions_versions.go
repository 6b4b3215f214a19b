package statuspage

// POST /actions/restore and /actions/retract: put an archived version of
// a partition back, or empty it on purpose. Like the other actions each
// needs the token, a name and a reason; unlike them the domain call
// records the action itself (idem restore and idem retract record theirs
// the same way), so the page only answers with its outcome.

import (
	"context"
	"net/http"
	"strings"

	"github.com/idem-data/idem/internal/why"
)

// VersionRequest is a restore or a retraction the page asks for.
type VersionRequest struct {
	Dataset, Partition string
	// ToRun: the run whose archived rows a restore puts back; "": the
	// newest version.
	ToRun                   string
	Who, Reason, RemoteAddr string
}

func (p *Page) restore(w http.ResponseWriter, r *http.Request) { p.versionAction(w, r, true) }
func (p *Page) retract(w http.ResponseWriter, r *http.Request) { p.versionAction(w, r, false) }

func (p *Page) versionAction(w http.ResponseWriter, r *http.Request, restore bool) {
	who, ds, key, ok := p.partitionTarget(w, r)
	if !ok {
		return
	}
	reason, ok := reasonOf(w, r, true)
	if !ok {
		return
	}
	if p.d.Versions == nil {
		http.Error(w, "this idem cannot restore or retract a partition", http.StatusServiceUnavailable)
		return
	}
	action := "retract"
	if restore {
		action = "restore"
	}
	req := VersionRequest{Dataset: ds.Name, Partition: key.Key, ToRun: strings.TrimSpace(r.PostForm.Get("to_run")),
		Who: who, Reason: reason, RemoteAddr: r.RemoteAddr}
	id, out, err := p.d.Versions(r.Context(), restore, req)
	if err != nil {
		out = err.Error()
	}
	p.d.Log.Info().Str("action", action).Str("requested_by", who).Str("dataset", ds.Name).Str("partition", key.Key).
		Str("outcome", out).Msg("operator action")
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		code := http.StatusOK
		if err != nil {
			code = http.StatusConflict
		}
		writeJSON(w, code, actionJSON{ID: id, Action: action, Outcome: out, OK: err == nil})
		return
	}
	http.Redirect(w, r, "/partition?dataset="+urlQueryEscape(ds.Name)+"&partition="+urlQueryEscape(key.Key)+
		"&msg="+urlQueryEscape(action+": "+out), http.StatusSeeOther)
}

// versionButtons: a partition that holds a load can be retracted and,
// once a load replaced another, restored (the domain call refuses when
// nothing was archived); a retracted one can be restored.
func (p *Page) versionButtons(_ context.Context, v *partitionView) {
	if p.d.Versions == nil {
		return
	}
	switch v.Story.Verdict.State {
	case why.StateLoaded, why.StateOutdated, why.StateProvisional, why.StateRejected:
		v.CanRetract, v.CanRestore = true, true
	case why.StateRetracted:
		v.CanRestore = true
	}
}
