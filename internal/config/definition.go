package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/strategies"
)

// The values of on_definition_change.
const (
	// DefinitionChangeNone: partitions loaded under another definition are
	// only reported (`idem audit outdated`, the status page).
	DefinitionChangeNone = "none"
	// DefinitionChangeReload: once every live replica runs the same
	// definition, they are reloaded by a backfill (`outdated__<hash>`).
	DefinitionChangeReload = "reload"
)

// DefinitionFields are the fields of a dataset that decide which rows its
// loads write: a change of any of them leaves the partitions loaded before
// it outdated. Retries, timeouts, then:, alerts and secrets are not in it.
var DefinitionFields = []string{"strategy", "source", "key", "checks", "on_schema_change"}

// Fields is the dataset as JSON keyed by its YAML field names, so that a
// diff names fields as the config file does ("source", "retries"). It is
// what each replica reports of a dataset to the fleet.
func (d *Dataset) Fields() (json.RawMessage, error) {
	y, err := yaml.Marshal(d)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	if err := yaml.Unmarshal(y, &fields); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}

// Definition is the dataset's definition: its DefinitionFields as one JSON
// object with sorted keys, on_schema_change spelled out and a postgres:
// source reduced to its query (its connection is a secret, not a
// definition).
func (d *Dataset) Definition() json.RawMessage {
	f, err := d.Fields()
	if err != nil {
		return nil
	}
	def, _ := DefinitionOf(f)
	return def
}

// DefinitionHash is a short hex hash of Definition: what every attempt of
// the dataset records, the same on every replica that runs the same
// definition.
func (d *Dataset) DefinitionHash() string { return HashDefinition(d.Definition()) }

// DefinitionOf picks the definition out of a dataset's Fields (as a
// replica reports them to the fleet); ok is false when fields is not a
// JSON object.
func DefinitionOf(fields json.RawMessage) (def json.RawMessage, ok bool) {
	var all map[string]any
	if json.Unmarshal(fields, &all) != nil || all == nil {
		return nil, false
	}
	out := make(map[string]any, len(DefinitionFields))
	for _, k := range DefinitionFields {
		if v, ok := all[k]; ok && v != nil {
			out[k] = v
		}
	}
	if p, _ := out["on_schema_change"].(string); p == "" {
		out["on_schema_change"] = strategies.OnSchemaChangeFail
	}
	if src, ok := out["source"].(map[string]any); ok {
		if pg, ok := src["postgres"].(map[string]any); ok {
			src["postgres"] = map[string]any{"sql": pg["sql"]}
		}
	}
	b, err := json.Marshal(out) // maps marshal with sorted keys
	if err != nil {
		return nil, false
	}
	return b, true
}

// HashDefinition is the hash DefinitionHash reports for a definition.
func HashDefinition(def json.RawMessage) string {
	sum := sha256.Sum256(def)
	return hex.EncodeToString(sum[:6])
}

// DefinitionChanges lists, sorted, the top-level fields whose values differ
// between two definitions (or any two JSON objects), a field missing on one
// side included.
func DefinitionChanges(a, b json.RawMessage) []string {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		if bytes.Equal(a, b) {
			return nil
		}
		return []string{"(definition)"}
	}
	var out []string
	for k, va := range ma {
		if vb, ok := mb[k]; !ok || !jsonEqual(va, vb) {
			out = append(out, k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func jsonEqual(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	ca, _ := json.Marshal(va) // maps marshal with sorted keys
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

// DefinitionChangePolicy is on_definition_change, DefinitionChangeNone
// when unset.
func (d *Dataset) DefinitionChangePolicy() string {
	if d.OnDefinitionChange == "" {
		return DefinitionChangeNone
	}
	return d.OnDefinitionChange
}

// ReloadsOutdated reports whether the dataset reloads its outdated
// partitions by itself (on_definition_change: reload).
func (d *Dataset) ReloadsOutdated() bool { return d.DefinitionChangePolicy() == DefinitionChangeReload }
