package strategies

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/*.sql.golden with the SQL the strategies generate")

// The SQL each strategy generates for one fixed spec, rendered from a plan
// built by hand (no database): a change to a statement shows up as a diff
// of testdata/*.sql.golden, to be read in review. go test -run TestGolden
// -update rewrites them.

var (
	goldenParams = Params{Partition: "2026-11-28", RunID: "r1"}
	goldenTarget = Table{Schema: "analytics", Name: "orders"}
	goldenSource = `SELECT order_date, id, customer, amount, updated_at
  FROM staging.orders
 WHERE order_date = @partition::date;`
	goldenColumns = []column{
		{Name: "order_date", Type: "date", NotNull: true},
		{Name: "id", Type: "bigint", NotNull: true},
		{Name: "customer", Type: "text"},
		{Name: "amount", Type: "numeric(12,2)"},
		{Name: "updated_at", Type: "timestamp with time zone"},
	}
	goldenSourceColumns = []string{"order_date", "id", "customer", "amount", "updated_at"}
)

// goldenPlan is what Describe would learn about goldenTarget: a plain
// table, or one partitioned by day with a child holding the partition.
func goldenPlan(partitioned bool, extra ...column) *Plan {
	t := &table{Table: goldenTarget, OID: 16384, Kind: "r", Columns: append(append([]column(nil), goldenColumns...), extra...)}
	pl := &Plan{target: t, source: goldenSourceColumns}
	if partitioned {
		t.Kind = "p"
		pl.partStrat, pl.partNatts, pl.partKey, pl.partKeyType = "r", 1, "order_date", "date"
		pl.children = []child{{schema: "analytics", name: "orders_2026_11_28", bound: "FOR VALUES FROM ('2026-11-28') TO ('2026-11-29')"}}
	}
	return pl
}

func goldenStrategy[S Strategy](t *testing.T, name string, spec Spec) S {
	t.Helper()
	spec.Target, spec.Source = goldenTarget, goldenSource
	s, err := New(name, spec)
	require.NoError(t, err)
	return s.(S)
}

func TestGolden(t *testing.T) {
	deleteInsert := func(partitioned, truncate bool, route string) func(t *testing.T) []string {
		return func(t *testing.T) []string {
			s := goldenStrategy[*DeleteInsert](t, "delete_insert", Spec{PartitionColumn: "order_date", TruncatePartition: truncate})
			pl, err := s.plan(goldenPlan(partitioned), goldenParams)
			require.NoError(t, err)
			require.Equal(t, route, pl.route)
			b := &pgx.Batch{}
			pl.queue(b, goldenParams, &Result{})
			return batchSQL(b)
		}
	}
	merge := func(version string) func(t *testing.T) []string {
		return func(t *testing.T) []string {
			s := goldenStrategy[*Merge](t, "merge", Spec{Key: []string{"id"}, VersionColumn: version})
			cols, err := s.plan(goldenPlan(false))
			require.NoError(t, err)
			// The merge route; the on_conflict route, first try and after a
			// duplicate key (21000).
			return []string{s.mergeStatement(cols), s.statement(cols, false), s.statement(cols, true)}
		}
	}
	appendDedupe := func(t *testing.T) *AppendDedupe {
		return goldenStrategy[*AppendDedupe](t, "append_dedupe", Spec{
			Key: []string{"id"}, PartitionColumn: "order_date", View: Table{Schema: "analytics", Name: "orders_latest"},
		})
	}
	bookkeeping := []column{{Name: "run_id", Type: "text"}, {Name: "load_seq", Type: "bigint"}}
	for _, tc := range []struct {
		name   string
		render func(t *testing.T) []string
	}{
		{"delete_insert", deleteInsert(false, false, routeDelete)},
		{"delete_insert_delete_child", deleteInsert(true, false, routeDeleteChild)},
		{"delete_insert_truncate_partition", deleteInsert(true, true, routeTruncateChild)},
		{"merge", merge("")},
		{"merge_version", merge("updated_at")},
		{"append_dedupe_setup", func(t *testing.T) []string {
			s := appendDedupe(t)
			tb, _, err := s.target(goldenPlan(false, bookkeeping...))
			require.NoError(t, err)
			_, createIndex, _, body := s.setup(tb)
			return []string{createIndex, "CREATE OR REPLACE VIEW " + s.spec.View.ident() + body}
		}},
		{"append_dedupe_load", func(t *testing.T) []string {
			stmt, err := appendDedupe(t).plan(goldenPlan(false, bookkeeping...))
			require.NoError(t, err)
			return []string{stmt}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(tc.render(t), ";\n\n") + ";\n"
			path := filepath.Join("testdata", tc.name+".sql.golden")
			if *update {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -run TestGolden -update to create it")
			require.Equal(t, string(want), got, "the SQL changed: review it, then go test -run TestGolden -update")
		})
	}
}

func batchSQL(b *pgx.Batch) []string {
	out := make([]string, len(b.QueuedQueries))
	for i, q := range b.QueuedQueries {
		out[i] = strings.TrimSpace(q.SQL)
	}
	return out
}
