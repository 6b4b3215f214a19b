package lineage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Table is a relation a plan reads.
type Table struct {
	Schema, Name string
}

// String is schema.name, the form Warehouse.Dataset and Inputs take.
func (t Table) String() string { return t.Schema + "." + t.Name }

// TablesFromExplain lists the relations the plan of EXPLAIN (VERBOSE,
// FORMAT JSON) reads: every plan node's "Relation Name" with its "Schema",
// in the main plan, its init plans and subplans, sorted and without
// duplicates. VERBOSE matters: without it PostgreSQL omits the schema, and
// that is an error here rather than a guess.
func TablesFromExplain(plan []byte) ([]Table, error) {
	var doc []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil {
		return nil, fmt.Errorf("lineage: reading EXPLAIN output: %w", err)
	}
	if len(doc) == 0 {
		return nil, errors.New("lineage: EXPLAIN output holds no plan")
	}
	var out []Table
	for _, d := range doc {
		if err := walkPlan(d.Plan, &out); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b Table) int {
		return cmp.Or(cmp.Compare(a.Schema, b.Schema), cmp.Compare(a.Name, b.Name))
	})
	return slices.Compact(out), nil
}

type planNode struct {
	Relation *string           `json:"Relation Name"`
	Schema   *string           `json:"Schema"`
	Plans    []json.RawMessage `json:"Plans"`
}

func walkPlan(raw json.RawMessage, out *[]Table) error {
	var n planNode
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("lineage: reading EXPLAIN output: %w", err)
	}
	if n.Relation != nil {
		if n.Schema == nil {
			return fmt.Errorf("lineage: the plan reads %q without naming its schema; run EXPLAIN with VERBOSE", *n.Relation)
		}
		*out = append(*out, Table{Schema: *n.Schema, Name: *n.Relation})
	}
	for _, c := range n.Plans {
		if err := walkPlan(c, out); err != nil {
			return err
		}
	}
	return nil
}

// Querier runs a statement: a pgx.Tx, a *pgx.Conn or a pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// partitionRoots maps each table to the root of its partition tree (itself
// when it is not a partition), so that a plan that reads some partitions of
// a partitioned table names that table, as a reader of the source would.
const partitionRoots = `
SELECT coalesce(array_agg(DISTINCT coalesce(rn.nspname, t.s) || '.' || coalesce(rc.relname, t.n)), '{}')
  FROM unnest($1::text[], $2::text[]) AS t(s, n)
  LEFT JOIN pg_namespace ns ON ns.nspname = t.s
  LEFT JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = t.n
  LEFT JOIN pg_class rc ON rc.oid = coalesce(pg_partition_root(c.oid), c.oid)
  LEFT JOIN pg_namespace rn ON rn.oid = rc.relnamespace`

// SourceTables lists the tables source reads (schema.table each, sorted),
// as the planner sees them: it runs EXPLAIN (VERBOSE, FORMAT JSON) on
// source with args (pgx.NamedArgs{"partition": ..., "run_id": ...}), which
// plans the statement without running it, then names each partition by its
// partitioned table. A view is listed as the tables behind it; a table the
// planner needs not read (a join it removed) is not listed, and neither is
// one a function reads inside its body.
func SourceTables(ctx context.Context, q Querier, source string, args ...any) ([]string, error) {
	var plan []byte
	if err := q.QueryRow(ctx, "EXPLAIN (VERBOSE, FORMAT JSON) "+source, args...).Scan(&plan); err != nil {
		return nil, fmt.Errorf("lineage: explaining the source: %w", err)
	}
	tables, err := TablesFromExplain(plan)
	if err != nil || len(tables) == 0 {
		return nil, err
	}
	schemas := make([]string, len(tables))
	names := make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	var out []string
	if err := q.QueryRow(ctx, partitionRoots, schemas, names).Scan(&out); err != nil {
		return nil, fmt.Errorf("lineage: naming the partitions' tables: %w", err)
	}
	slices.Sort(out)
	return out, nil
}
