package why

import (
	"context"
	"strings"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
)

// Outdated says which definition the partition's latest load ran and what
// changed since.
type Outdated struct {
	// Loaded is the hash of the definition the load ran; "" before idem
	// recorded definitions.
	Loaded  string `json:"loaded_definition"`
	Current string `json:"current_definition"`
	// Changed names the fields that differ (source, checks, …); empty
	// when the loaded definition is not known.
	Changed []string `json:"changed"`
}

// readOutdated fills r.Outdated when the latest success ran another
// definition than ds's, with the changed fields from idem.definitions.
func readOutdated(ctx context.Context, src Sources, ds Dataset, r *Report) {
	var won *audit.StoryAttempt
	for i := range r.Attempts {
		if r.Attempts[i].Status == audit.StatusSuccess {
			won = &r.Attempts[i]
			break
		}
	}
	if won == nil || !audit.Outdated(won.Definition, ds.Definition) {
		return
	}
	o := &Outdated{Current: ds.Definition, Changed: []string{}}
	r.Outdated = o
	if won.Definition == nil {
		return
	}
	o.Loaded = *won.Definition
	if src.Audit == nil {
		return
	}
	defs, err := audit.DefinitionsOf(ctx, src.Audit, r.Pipeline, r.Dataset, []string{o.Loaded})
	if err != nil {
		r.Notes = append(r.Notes, "the definitions could not be read: "+err.Error())
		return
	}
	if def, ok := defs[o.Loaded]; ok {
		o.Changed = config.DefinitionChanges(def, ds.DefinitionJSON)
	}
}

// outdatedChanges: "source, checks changed", or what is known.
func outdatedChanges(o *Outdated) string {
	switch {
	case o.Loaded == "":
		return "definition unknown: loaded before definitions were recorded"
	case len(o.Changed) == 0:
		return "definition " + o.Loaded + ", not recorded"
	}
	return strings.Join(o.Changed, ", ") + " changed"
}
