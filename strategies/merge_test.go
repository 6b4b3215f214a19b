package strategies

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProbesTarget(t *testing.T) {
	node := func(typ, alias string, kids ...string) string {
		s := `{"Node Type": "` + typ + `", "Alias": "` + alias + `"`
		if len(kids) > 0 {
			s += `, "Plans": [`
			for i, k := range kids {
				if i > 0 {
					s += ","
				}
				s += k
			}
			s += "]"
		}
		return s + "}"
	}
	plan := func(root string) []byte { return []byte(`[{"Plan": ` + root + `}]`) }
	merge := func(join string) []byte { return plan(node("ModifyTable", "idem_t", join)) }

	require.True(t, probesTarget(merge(node("Nested Loop", "", node("Seq Scan", "src"), node("Index Scan", "idem_t")))))
	require.True(t, probesTarget(merge(node("Nested Loop", "", node("Index Scan", "src"),
		node("Append", "", node("Index Only Scan", "idem_t_1"), node("Index Scan", "idem_t_2"))))), "a partitioned target")
	require.False(t, probesTarget(merge(node("Hash Join", "", node("Seq Scan", "idem_t"), node("Hash", "", node("Seq Scan", "src"))))))
	require.False(t, probesTarget(merge(node("Nested Loop", "", node("Seq Scan", "src"), node("Materialize", "", node("Seq Scan", "idem_t"))))),
		"no index to probe")
	require.False(t, probesTarget(merge(node("Nested Loop", "", node("Nested Loop", "", node("Seq Scan", "a"), node("Index Scan", "b")),
		node("Index Scan", "idem_t")))), "the source joins tables of its own")
	require.False(t, probesTarget([]byte("not json")))
}
