package config

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A definition hash follows what decides a load's rows, never retries,
// timeouts, then:, the connection's secret or the order keys are written.
func TestDefinitionHash(t *testing.T) {
	const base = `pipeline: shop
datasets:
  orders:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: SELECT * FROM staging.src WHERE event_date = @partition
  mirror:
    strategy: delete_insert
    target: analytics.m
    partition_column: event_date
    source:
      postgres: {url: "postgres://u:SECRET@app/db", sql: "SELECT * FROM t WHERE d = @partition"}
  daily:
    strategy: delete_insert
    target: analytics.d
    partition_column: event_date
    source: SELECT 1
`
	parse := func(y string) *Config {
		t.Helper()
		c, err := Parse([]byte(y), nil)
		require.NoError(t, err)
		return c
	}
	a := parse(base)
	h := a.Datasets["orders"].DefinitionHash()
	require.Len(t, h, 12)
	require.NotEqual(t, h, a.Datasets["daily"].DefinitionHash())

	// What does not decide the rows leaves the hash alone; on_schema_change
	// left out is fail.
	same := parse(strings.Replace(base, "    source: SELECT * FROM staging.src", "    retries: 9\n    timeout: 1m\n    then: [daily]\n    on_schema_change: fail\n    source: SELECT * FROM staging.src", 1))
	require.Equal(t, h, same.Datasets["orders"].DefinitionHash())
	// The source's connection is a secret: it never reaches the definition.
	other := parse(strings.Replace(base, "SECRET@app", "OTHER@replica", 1))
	require.Equal(t, a.Datasets["mirror"].DefinitionHash(), other.Datasets["mirror"].DefinitionHash())
	require.NotContains(t, string(a.Datasets["mirror"].Definition()), "SECRET")

	for field, edit := range map[string]string{
		"source":           "staging.src WHERE event_date = @partition AND total > 0",
		"checks":           "staging.src WHERE event_date = @partition\n    checks: [{not_null: [id]}]",
		"on_schema_change": "staging.src WHERE event_date = @partition\n    on_schema_change: ignore",
	} {
		b := parse(strings.Replace(base, "staging.src WHERE event_date = @partition", edit, 1))
		require.NotEqual(t, h, b.Datasets["orders"].DefinitionHash(), field)
		require.Equal(t, []string{field}, DefinitionChanges(a.Datasets["orders"].Definition(), b.Datasets["orders"].Definition()), field)
	}

	// The definition a replica reports to the fleet (Fields) hashes alike,
	// after a trip through JSON.
	f, err := a.Datasets["mirror"].Fields()
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(f, &m))
	f, err = json.Marshal(m)
	require.NoError(t, err)
	def, ok := DefinitionOf(f)
	require.True(t, ok)
	require.Equal(t, a.Datasets["mirror"].DefinitionHash(), HashDefinition(def))
}
