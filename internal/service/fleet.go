package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/strategies"
)

// ConfigVersion names what a config makes idem do: a hash of the pipeline
// and the datasets, the same on every replica that runs the same datasets,
// whatever the secrets, URLs or comments.
func ConfigVersion(cfg *config.Config) string {
	b, err := json.Marshal(struct {
		Pipeline string
		Datasets map[string]*config.Dataset
	}{cfg.Pipeline, cfg.Datasets})
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// replicaName names this process in the fleet: host and pid.
func replicaName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Definitions is what each replica reports of its datasets to the fleet:
// each one as JSON keyed by its YAML field names, so that a diff names
// fields as the config file does ("source", "retries").
func Definitions(cfg *config.Config) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(cfg.Datasets))
	for name, ds := range cfg.Datasets {
		if b, err := ds.Fields(); err == nil {
			out[name] = b
		}
	}
	return out
}

// DefinitionsDiff is what a new config changes against a running one.
type DefinitionsDiff struct {
	Added   []string
	Removed []string
	// Changed maps a dataset in both to the fields whose values differ.
	Changed map[string][]string
}

// Empty reports whether no dataset was added, removed or changed.
func (d DefinitionsDiff) Empty() bool {
	return len(d.Added) == 0 && len(d.Removed) == 0 && len(d.Changed) == 0
}

// DiffDefinitions compares the datasets a replica runs with those of a new
// config, field by field. A running dataset without a definition (a replica
// of an older idem) is compared by name only.
func DiffDefinitions(running, next map[string]json.RawMessage) DefinitionsDiff {
	d := DefinitionsDiff{Changed: map[string][]string{}}
	for _, name := range slices.Sorted(maps.Keys(next)) {
		old, ok := running[name]
		if !ok {
			d.Added = append(d.Added, name)
			continue
		}
		if old == nil {
			continue
		}
		if fields := config.DefinitionChanges(old, next[name]); len(fields) > 0 {
			d.Changed[name] = fields
		}
	}
	for _, name := range slices.Sorted(maps.Keys(running)) {
		if _, ok := next[name]; !ok {
			d.Removed = append(d.Removed, name)
		}
	}
	return d
}

// schemaPeer names a live replica of the fleet, other than self, that runs
// a dataset with an on_schema_change other than this replica's, and that
// policy: a refused schema change is left to it during a rolling config
// change (handlers.Handler.SchemaPeer).
func schemaPeer(c *consumer.Consumer, self string, mine func(dataset string) string) func(ctx context.Context, dataset string) (string, string) {
	return func(ctx context.Context, dataset string) (string, string) {
		members, err := c.FleetNow(ctx)
		if err != nil {
			return "", ""
		}
		own := mine(dataset)
		for _, m := range members {
			if m.Replica == self || time.Since(m.Updated) > 3*consumer.DefaultFleetRefresh {
				continue
			}
			def, ok := m.Definitions[dataset]
			if !ok {
				continue
			}
			var d struct {
				OnSchemaChange string `json:"on_schema_change"`
			}
			if json.Unmarshal(def, &d) != nil {
				continue
			}
			if d.OnSchemaChange == "" {
				d.OnSchemaChange = strategies.OnSchemaChangeFail
			}
			if d.OnSchemaChange != own {
				return m.Replica, d.OnSchemaChange
			}
		}
		return "", ""
	}
}
