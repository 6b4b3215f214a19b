package service

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/config"
)

func TestDiffDefinitions(t *testing.T) {
	def := func(s string) json.RawMessage { return json.RawMessage(s) }
	orders := def(`{"source":"SELECT 1","retries":3,"key":["id"]}`)
	for _, tc := range []struct {
		name          string
		running, next map[string]json.RawMessage
		want          DefinitionsDiff
	}{
		{"same", map[string]json.RawMessage{"orders": orders}, map[string]json.RawMessage{"orders": orders},
			DefinitionsDiff{Changed: map[string][]string{}}},
		{"key order and spacing are no change", map[string]json.RawMessage{"orders": orders},
			map[string]json.RawMessage{"orders": def(`{ "key": ["id"], "retries": 3, "source": "SELECT 1" }`)},
			DefinitionsDiff{Changed: map[string][]string{}}},
		{"added and removed", map[string]json.RawMessage{"orders": orders, "events": orders},
			map[string]json.RawMessage{"orders": orders, "customers": orders},
			DefinitionsDiff{Added: []string{"customers"}, Removed: []string{"events"}, Changed: map[string][]string{}}},
		{"fields changed, added, dropped", map[string]json.RawMessage{"orders": orders},
			map[string]json.RawMessage{"orders": def(`{"source":"SELECT 2","retries":3,"key":["id","day"],"timeout":"30s"}`)},
			DefinitionsDiff{Changed: map[string][]string{"orders": {"key", "source", "timeout"}}}},
		{"field removed", map[string]json.RawMessage{"orders": orders},
			map[string]json.RawMessage{"orders": def(`{"source":"SELECT 1","key":["id"]}`)},
			DefinitionsDiff{Changed: map[string][]string{"orders": {"retries"}}}},
		{"no definition running: names only", map[string]json.RawMessage{"orders": nil},
			map[string]json.RawMessage{"orders": orders},
			DefinitionsDiff{Changed: map[string][]string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, DiffDefinitions(tc.running, tc.next))
		})
	}
}

// The config version follows what idem does, never where it connects.
func TestConfigVersion(t *testing.T) {
	parse := func(yaml string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(yaml), nil)
		require.NoError(t, err)
		return cfg
	}
	const base = `pipeline: shop
nats:
  url: %s
postgres:
  url: %s
datasets:
  orders:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: SELECT * FROM staging.src WHERE event_date = @partition
`
	a := parse(sprintf(base, "nats://a:4222", "postgres://u:secret@a/db"))
	b := parse(sprintf(base, "nats://b:4222", "postgres://u:other@b/db"))
	require.Equal(t, ConfigVersion(a), ConfigVersion(b))
	require.Len(t, ConfigVersion(a), 12)

	b.Datasets["orders"].Source.SQL = "SELECT 1"
	require.NotEqual(t, ConfigVersion(a), ConfigVersion(b))
	require.Equal(t, []string{"source"}, DiffDefinitions(Definitions(a), Definitions(b)).Changed["orders"])
}
