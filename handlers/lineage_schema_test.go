package handlers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/lineage"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/lineagetest"
)

// lineageEnv is f with lineage on, its source every column of staging.src
// (so a column added there is a new source column) and policy as its
// on_schema_change.
func lineageEnv(t *testing.T, f fixture, policy string) *env {
	t.Helper()
	e := newEnv(t, f, func(s *strategies.Spec) {
		s.OnSchemaChange = policy
		s.Source = "SELECT * FROM staging.src WHERE event_date = @partition AND staging.gate()"
	})
	e.ds.Target = "analytics.t"
	e.h.Lineage = &handlers.Lineage{Namespace: "ns", Warehouse: lineage.NewWarehouse(&e.db.Pool.Config().ConnConfig.Config)}
	return e
}

// lineageEvent is run runID's event of type typ from the outbox, checked
// against the OpenLineage schemas and idem's.
func (e *env) lineageEvent(runID string, typ lineage.EventType) lineage.RunEvent {
	e.t.Helper()
	var body string
	require.NoError(e.t, e.db.Pool.QueryRow(context.Background(),
		"SELECT lineage::text FROM idem.outbox WHERE run_id = $1 AND lineage ->> 'eventType' = $2", runID, string(typ)).Scan(&body),
		"the %s event of run %s", typ, runID)
	lineagetest.Validate(e.t, []byte(body))
	var ev lineage.RunEvent
	require.NoError(e.t, json.Unmarshal([]byte(body), &ev))
	return ev
}

// committedColumns are the target's columns as the catalog holds them now,
// read apart from idem, as the schema facet should list them.
func (e *env) committedColumns() []lineage.SchemaField {
	e.t.Helper()
	rows, err := e.db.Pool.Query(context.Background(), `
		SELECT attname::text, format_type(atttypid, atttypmod), row_number() OVER (ORDER BY attnum)::int
		  FROM pg_attribute WHERE attrelid = 'analytics.t'::regclass AND attnum > 0 AND NOT attisdropped
		 ORDER BY attnum`)
	require.NoError(e.t, err)
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lineage.SchemaField, error) {
		var f lineage.SchemaField
		return f, r.Scan(&f.Name, &f.Type, &f.OrdinalPosition)
	})
	require.NoError(e.t, err)
	return cols
}

func schemaFacet(t *testing.T, ev lineage.RunEvent) []lineage.SchemaField {
	t.Helper()
	require.Len(t, ev.Outputs, 1)
	require.NotNil(t, ev.Outputs[0].Facets.Schema, "%s: the output's schema facet", ev.EventType)
	return ev.Outputs[0].Facets.Schema.Fields
}

// TestLineageSchemaAfterAppendNewColumns: with append_new_columns, the
// COMPLETE of the load that added a source's new column lists it in the
// output's schema facet, the target's columns as that load committed them,
// and names the change in idem_run; the loads before and after it list the
// columns they found and no change. Every strategy, alone and grouped.
func TestLineageSchemaAfterAppendNewColumns(t *testing.T) {
	t.Parallel()
	for _, grouped := range []bool{false, true} {
		for _, f := range fixtures {
			if grouped {
				f.grouped = true
				f.name += "_grouped"
			}
			t.Run(f.name, func(t *testing.T) {
				t.Parallel()
				e := lineageEnv(t, f, strategies.OnSchemaChangeAppend)
				e.stage("2026-11-28", 1, 3, 0, 1)
				e.mustLoad("2026-11-28", "r1", false)
				before := e.committedColumns()
				done := e.lineageEvent("r1", lineage.Complete)
				require.Equal(t, before, schemaFacet(t, done))
				require.Nil(t, done.Run.Facets.Idem.SchemaChanges, "no change, none listed")
				require.NotContains(t, names(before), "channel")

				e.db.Exec(t, "ALTER TABLE staging.src ADD COLUMN channel text; UPDATE staging.src SET channel = 'web'")
				out := e.mustLoad("2026-11-28", "r2", false)
				require.Len(t, out.SchemaChanges, 1)
				require.Equal(t, strategies.ActionAdded, out.SchemaChanges[0].Action)

				after := e.committedColumns()
				done = e.lineageEvent("r2", lineage.Complete)
				fields := schemaFacet(t, done)
				require.Equal(t, after, fields, "the columns as the load committed them")
				require.Equal(t, lineage.SchemaField{Name: "channel", Type: "text", OrdinalPosition: len(before) + 1}, fields[len(fields)-1])
				require.Equal(t, []lineage.SchemaChange{{Column: "channel", Change: strategies.ChangeNew, Action: strategies.ActionAdded,
					NewType: "text", Policy: strategies.OnSchemaChangeAppend}}, done.Run.Facets.Idem.SchemaChanges)

				start := e.lineageEvent("r2", lineage.Start)
				require.Nil(t, start.Outputs[0].Facets.Schema, "a START names no columns")
				require.Nil(t, start.Run.Facets.Idem.SchemaChanges, "a START is before the load met the change")

				// The next load finds the column there: the same columns, no change.
				e.mustLoad("2026-11-28", "r3", false)
				done = e.lineageEvent("r3", lineage.Complete)
				require.Equal(t, after, schemaFacet(t, done))
				require.Nil(t, done.Run.Facets.Idem.SchemaChanges)
			})
		}
	}
}

// TestLineageSchemaWidened: sync_all_columns widens a column; COMPLETE lists
// its new type and the change with both types.
func TestLineageSchemaWidened(t *testing.T) {
	t.Parallel()
	e := lineageEnv(t, fixtureNamed("delete_insert"), strategies.OnSchemaChangeSync)
	e.stage("2026-11-28", 1, 3, 0, 1)
	e.db.Exec(t, "ALTER TABLE staging.src ALTER COLUMN amount TYPE numeric(14,2)")
	e.mustLoad("2026-11-28", "r1", false)

	done := e.lineageEvent("r1", lineage.Complete)
	fields := schemaFacet(t, done)
	require.Equal(t, e.committedColumns(), fields)
	require.Equal(t, lineage.SchemaField{Name: "amount", Type: "numeric(14,2)", OrdinalPosition: 3}, fields[2])
	require.Equal(t, []lineage.SchemaChange{{Column: "amount", Change: strategies.ChangeRetyped, Action: strategies.ActionWidened,
		OldType: "numeric(12,2)", NewType: "numeric(14,2)", Policy: strategies.OnSchemaChangeSync}}, done.Run.Facets.Idem.SchemaChanges)
}

// TestLineageSchemaRefused: a change on_schema_change fail refuses is
// listed in the FAIL's idem_run, as idem.schema_changes records it, and the
// FAIL names no columns: nothing committed.
func TestLineageSchemaRefused(t *testing.T) {
	t.Parallel()
	e := lineageEnv(t, fixtureNamed("merge"), strategies.OnSchemaChangeFail)
	e.stage("2026-11-28", 1, 3, 0, 1)
	e.db.Exec(t, "ALTER TABLE staging.src ADD COLUMN channel text")
	out, err := e.load("2026-11-28", "r1", false)
	require.True(t, handlers.IsFatal(err), "%v", err)

	fail := e.lineageEvent("r1", lineage.Fail)
	require.Nil(t, fail.Outputs[0].Facets.Schema)
	require.Equal(t, []lineage.SchemaChange{{Column: "channel", Change: strategies.ChangeNew, Action: strategies.ActionRefused,
		NewType: "text", Policy: strategies.OnSchemaChangeFail}}, fail.Run.Facets.Idem.SchemaChanges)
	require.Len(t, out.SchemaChanges, 1)
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.schema_changes WHERE audit_id = $1", out.AuditID))
}

// TestLineageSchemaFailAfterAdding: a load that added a column and then
// failed rolled the column back: its FAIL lists neither the column nor the
// change.
func TestLineageSchemaFailAfterAdding(t *testing.T) {
	t.Parallel()
	e := lineageEnv(t, fixtureNamed("delete_insert"), strategies.OnSchemaChangeAppend)
	e.db.Exec(t, "ALTER TABLE staging.src ADD COLUMN channel text")
	_, err := e.load("2026-11-28", "r1", false) // nothing staged: empty_source, after the ALTER
	require.ErrorIs(t, err, strategies.ErrEmptySource)

	fail := e.lineageEvent("r1", lineage.Fail)
	require.Nil(t, fail.Outputs[0].Facets.Schema)
	require.Nil(t, fail.Run.Facets.Idem.SchemaChanges, "the addition rolled back with the load")
	require.NotContains(t, names(e.committedColumns()), "channel")
}

func names(fs []lineage.SchemaField) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}

// TestIdemRunFacetNamesEverySchemaChange: idem's facet schema takes every
// change, action and policy package strategies names, so no event a load
// writes fails a consumer that validates it.
func TestIdemRunFacetNamesEverySchemaChange(t *testing.T) {
	t.Parallel()
	changes := []string{strategies.ChangeNew, strategies.ChangeRetyped, strategies.ChangeMissing}
	actions := []string{strategies.ActionAdded, strategies.ActionWidened, strategies.ActionIgnored, strategies.ActionKept,
		strategies.ActionRefused, strategies.ActionFound}
	var all []lineage.SchemaChange
	for _, p := range strategies.SchemaPolicies() {
		for _, c := range changes {
			for _, a := range actions {
				all = append(all, lineage.SchemaChange{Column: "c", Change: c, Action: a, OldType: "integer", NewType: "bigint", Policy: p})
			}
		}
	}
	a := lineage.Attempt{Namespace: "ns", Pipeline: "p", Dataset: "d", AuditID: 1, Number: 1, SchemaChanges: all}
	for _, ev := range []lineage.RunEvent{a.Complete(time.Now(), 1, nil), a.Fail(time.Now(), "refused", nil)} {
		body, err := ev.Marshal()
		require.NoError(t, err)
		lineagetest.Validate(t, body)
	}
}
