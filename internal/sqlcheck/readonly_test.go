package sqlcheck

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNotARead(t *testing.T) {
	for sql, want := range map[string][]string{
		"SELECT order_id FROM t WHERE d = @partition AND total > 1e6":         nil,
		"SELECT 'delete; drop' AS note, t.lock, x AS update FROM t -- ;":      nil,
		"SELECT 1; DELETE FROM t":                                             {"a semicolon (one statement only)", "DELETE (a write, DDL or locking keyword)"},
		"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d":               {"DELETE (a write, DDL or locking keyword)"},
		"SELECT * FROM t FOR UPDATE":                                          {"UPDATE (a write, DDL or locking keyword)"},
		"SELECT nextval('s')":                                                 {"calls nextval(), which has side effects"},
		"total > 0 OR pg_catalog.set_config('a', 'b', false) IS NULL":         {"calls pg_catalog.set_config(), which has side effects"},
		"(SELECT count(*) FROM (INSERT INTO x VALUES (1) RETURNING 1) i) > 0": {"INSERT (a write, DDL or locking keyword)"},
	} {
		var got []string
		for _, f := range NotARead(sql) {
			got = append(got, f.Name)
		}
		require.Equal(t, want, got, sql)
	}
	require.True(t, StartsWithSelect("  (WITH a AS (SELECT 1) SELECT * FROM a)"))
	require.True(t, StartsWithSelect("select 1"))
	require.False(t, StartsWithSelect("VALUES (1)"))
	require.False(t, StartsWithSelect("-- nothing"))
}
