package statuspage

// POST /actions/pause and /actions/resume: a dataset's pause, behind the
// operator token like the other actions. Package audit records each in
// idem.operator_actions with the pause itself, in one transaction; every
// replica holds or releases the dataset's events within about a second.

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idem-data/idem/audit"
)

// pauseLine is a pause as the grid's dataset header says it.
func pauseLine(p audit.Pause) string {
	s := fmt.Sprintf("paused by %s: %s", p.By, p.Reason)
	if p.Until != nil {
		s += ", until " + p.Until.UTC().Format("2006-01-02 15:04Z")
	}
	return s
}

func (p *Page) pause(w http.ResponseWriter, r *http.Request) {
	who, ds, ok := p.datasetTarget(w, r)
	if !ok {
		return
	}
	reason, ok := reasonOf(w, r, true)
	if !ok {
		return
	}
	var until *time.Time
	if u := strings.TrimSpace(r.PostForm.Get("until")); u != "" {
		t, err := audit.ParseUntil(u, time.Now()) // the database's clock, not the page's
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		until = &t
	}
	ps, err := audit.PauseDataset(r.Context(), p.d.DB, p.d.Pipeline, ds.Name, who, reason, until, r.RemoteAddr)
	out := ""
	if err == nil {
		out = ds.Name + " " + pauseLine(ps)
	}
	p.controlled(w, r, audit.ActionPause, who, out, err)
}

func (p *Page) resume(w http.ResponseWriter, r *http.Request) {
	who, ds, ok := p.datasetTarget(w, r)
	if !ok {
		return
	}
	reason, ok := reasonOf(w, r, false)
	if !ok {
		return
	}
	_, err := audit.ResumeDataset(r.Context(), p.d.DB, p.d.Pipeline, ds.Name, who, reason, r.RemoteAddr)
	if errors.Is(err, audit.ErrNotPaused) {
		http.Error(w, ds.Name+" is not paused", http.StatusConflict)
		return
	}
	p.controlled(w, r, audit.ActionResume, who, ds.Name+" resumed by "+who, err)
}

// controlled answers a pause or a resume as act answers the other actions.
func (p *Page) controlled(w http.ResponseWriter, r *http.Request, action, who, out string, err error) {
	if err != nil {
		p.fail(w, err)
		return
	}
	p.d.Log.Info().Str("action", action).Str("requested_by", who).Str("outcome", out).Msg("operator action")
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		writeJSON(w, http.StatusOK, actionJSON{Action: action, Outcome: out, OK: true})
		return
	}
	http.Redirect(w, r, "/?msg="+urlQueryEscape(action+": "+out), http.StatusSeeOther)
}
