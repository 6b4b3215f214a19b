package lineage

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

func TestUUIDv5(t *testing.T) {
	t.Parallel()
	// RFC 9562's DNS namespace and a name whose v5 UUID is widely published.
	require.Equal(t, "886313e1-3b8a-5372-9b90-0c9aee199e5d", uuidV5(mustParseUUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "python.org"))
	require.Equal(t, RunIDNamespace, uuidV5(mustParseUUID(urlNamespace), "https://github.com/idem-data/idem/lineage/run"))
}

func TestRunID(t *testing.T) {
	t.Parallel()
	id := RunID("shop", "shop", 1234, 1)
	require.Equal(t, "4:shop/4:shop/1234/1", RunIDName("shop", "shop", 1234, 1))
	require.Equal(t, id, RunID("shop", "shop", 1234, 1), "the same attempt has the same id, however often it is built")
	u, ok := parseUUID(id)
	require.True(t, ok)
	require.Equal(t, byte(0x50), u[6]&0xf0, "version 5")
	require.Equal(t, byte(0x80), u[8]&0xc0, "RFC 9562 variant")

	seen := map[string]string{}
	for _, c := range []struct {
		ns, p   string
		id      int64
		attempt int
	}{
		{"shop", "shop", 1234, 1},
		{"shop", "shop", 1234, 2},
		{"shop", "shop", 1235, 1},
		{"staging", "shop", 1234, 1},
		{"shop", "shop2", 1234, 1},
		// Lengths keep the parts apart: these would all read "a/b/c/1/1"
		// joined by slashes alone.
		{"a/b", "c", 1, 1},
		{"a", "b/c", 1, 1},
	} {
		name := RunIDName(c.ns, c.p, c.id, c.attempt)
		got := RunID(c.ns, c.p, c.id, c.attempt)
		require.NotContains(t, seen, got, "%s collides with %s", name, seen[got])
		seen[got] = name
	}
}

func TestCanonicalUUID(t *testing.T) {
	t.Parallel()
	got, ok := canonicalUUID("01890A5D-AC96-774B-BCCE-B302099A8057")
	require.True(t, ok)
	require.Equal(t, "01890a5d-ac96-774b-bcce-b302099a8057", got)
	for _, bad := range []string{"", "00000000-0000-0000-0000-000000000000", "01890a5dac96774bbcceb302099a8057", "{01890a5d-ac96-774b-bcce-b302099a8057}", "01890a5d-ac96-774b-bcce-b302099a805g", "01890a5d-ac96-774b-bcce-b302099a80577"} {
		_, ok := canonicalUUID(bad)
		require.False(t, ok, bad)
	}
}

// TestRunIDInSQL: the SQL in RunIDName's doc recomputes a run id from an
// audit row, so an operator can join lineage runs to idem.pipeline_audit.
func TestRunIDInSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS "uuid-ossp"`); err != nil {
		t.Skipf("uuid-ossp is not installed on this server: %v", err)
	}
	for _, c := range []struct {
		ns, pipeline string
		id           int64
		attempt      int
	}{{"shop", "shop", 1234, 1}, {"prod/eu", "café", 9_000_000_000, 12}} {
		var got string
		err := db.Pool.QueryRow(ctx, `SELECT uuid_generate_v5($1, format('%s:%s/%s:%s/%s/%s', octet_length($2), $2, octet_length($3), $3, $4::bigint, $5::int))::text`,
			RunIDNamespace, c.ns, c.pipeline, c.id, c.attempt).Scan(&got)
		require.NoError(t, err)
		require.Equal(t, RunID(c.ns, c.pipeline, c.id, c.attempt), got)
	}
}
