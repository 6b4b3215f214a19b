package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestSourceReadsAStringOrAMapping(t *testing.T) {
	t.Parallel()
	var d struct {
		A Source `yaml:"a"`
		B Source `yaml:"b"`
		C Source `yaml:"c"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(`
a: SELECT * FROM s WHERE d = @partition
b:
  files: {url: "s3://landing/orders/dt={partition}/", format: csv, ready: {marker: _SUCCESS}}
c:
  postgres: {url: "postgres://app@replica/shop", sql: "SELECT * FROM o WHERE d = @partition", max_replica_lag: 30s}
`), &d))
	require.Equal(t, Source{SQL: "SELECT * FROM s WHERE d = @partition"}, d.A)
	require.Equal(t, "sql", d.A.Kind())
	require.Equal(t, "files", d.B.Kind())
	require.Equal(t, &FilesSource{URL: "s3://landing/orders/dt={partition}/", Format: "csv", Ready: &FilesReady{Marker: "_SUCCESS"}}, d.B.Files)
	require.Equal(t, "postgres", d.C.Kind())
	require.Equal(t, Duration(30*time.Second), d.C.Postgres.MaxReplicaLag)

	// A SELECT is written back as the string it was read from.
	out, err := yaml.Marshal(d.A)
	require.NoError(t, err)
	require.Equal(t, "SELECT * FROM s WHERE d = @partition\n", string(out))

	var bad struct {
		S Source `yaml:"s"`
	}
	require.ErrorContains(t, yaml.Unmarshal([]byte("s: [1, 2]"), &bad), "source is a SELECT, or a mapping with files: or postgres:")
}
