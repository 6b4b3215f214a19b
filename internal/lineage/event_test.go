package lineage

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/schemas"
)

var sampleTime = time.Date(2026, 11, 29, 3, 4, 5, 123456000, time.FixedZone("CET", 3600))

func mustPartition(t schemas.PartitionType, s string) schemas.Partition {
	p, err := schemas.ParsePartition(t, s)
	if err != nil {
		panic(err)
	}
	return p
}

func sampleAttempt() Attempt {
	cfg, err := pgconn.ParseConfig("postgres://idem@DB.example.com:6543/warehouse")
	if err != nil {
		panic(err)
	}
	w := NewWarehouse(cfg)
	parent, _ := ParentFromAttributes(map[string]string{
		AttrParentID:     "airflow/shop_daily.load_orders/01890a5d-ac96-774b-bcce-b302099a8057",
		AttrRootParentID: "airflow/shop_daily/01890a5d-ac96-774b-bcce-b302099a8000",
	})
	return Attempt{
		Namespace:  "shop",
		Pipeline:   "shop",
		Dataset:    "orders",
		AuditID:    1234,
		Number:     2,
		Partition:  mustPartition(schemas.PartitionDate, "2026-11-28"),
		EventRunID: "scheduled__2026-11-28",
		Parent:     parent,
		Inputs:     w.Inputs([]string{"staging.orders", "staging.customers"}),
		Output:     w.Dataset("analytics.fact_orders"),
	}
}

var sampleChecks = []Assertion{
	{Assertion: "row_count", Success: true, Severity: "error", Name: "enough_rows", Expected: ">= 1", Actual: "42"},
	{Assertion: "not_null", Success: false, Column: "customer_id", Severity: "warn", Name: "customer_known", Actual: "3"},
}

var sampleColumns = []SchemaField{
	{Name: "id", Type: "bigint", OrdinalPosition: 1},
	{Name: "amount", Type: "numeric(14,2)", OrdinalPosition: 2},
	{Name: "channel", Type: "text", OrdinalPosition: 3},
}

var sampleChanges = []SchemaChange{
	{Column: "channel", Change: "new_column", Action: "added", NewType: "text", Policy: "sync_all_columns"},
	{Column: "amount", Change: "retyped", Action: "widened", OldType: "numeric(12,2)", NewType: "numeric(14,2)", Policy: "sync_all_columns"},
	{Column: "legacy", Change: "missing_column", Action: "kept", OldType: "integer", Policy: "sync_all_columns"},
}

// TestEventsValidate: every event the package builds validates against the
// RunEvent schema and each facet against its own.
func TestEventsValidate(t *testing.T) {
	t.Parallel()
	a := sampleAttempt()
	hour := a
	hour.Partition = mustPartition(schemas.PartitionHour, "2026-11-28T13:00:00Z")
	hour.Parent = nil
	text := a
	text.Partition = mustPartition(schemas.PartitionText, "eu-west")
	text.Inputs = nil
	noRoot := a
	noRoot.Parent = &Parent{RunRef: a.Parent.RunRef}
	changed := a
	changed.OutputColumns, changed.SchemaChanges = sampleColumns, sampleChanges

	events := map[string]RunEvent{
		"start":              a.Start(sampleTime),
		"complete":           a.Complete(sampleTime, 42, nil),
		"complete, checks":   a.Complete(sampleTime, 42, sampleChecks),
		"fail":               a.Fail(sampleTime, "relation \"staging.orders\" does not exist", nil),
		"fail, checks":       a.Fail(sampleTime, "check enough_rows failed", sampleChecks),
		"abort":              a.Abort(sampleTime),
		"hour, no parent":    hour.Complete(sampleTime, 0, nil),
		"text, no inputs":    text.Start(sampleTime),
		"parent, no root":    noRoot.Start(sampleTime),
		"schema, changes":    changed.Complete(sampleTime, 42, sampleChecks),
		"changes refused":    changed.Fail(sampleTime, "schema_mismatch: ...", nil),
		"changes, start":     changed.Start(sampleTime),
		"changes, abort":     changed.Abort(sampleTime),
		"default everything": Attempt{Number: 1, Partition: mustPartition(schemas.PartitionDate, "2026-01-01")}.Start(time.Time{}),
	}
	for name, ev := range events {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body, err := ev.Marshal()
			require.NoError(t, err)
			validateEvent(t, body)
		})
	}
}

func TestAttemptEvents(t *testing.T) {
	t.Parallel()
	a := sampleAttempt()
	start, done := a.Start(sampleTime), a.Complete(sampleTime.Add(time.Minute), 42, sampleChecks)

	require.Equal(t, Start, start.EventType)
	require.Equal(t, Complete, done.EventType)
	require.Equal(t, start.Run.RunID, done.Run.RunID, "START and COMPLETE are one run")
	require.Equal(t, RunID("shop", "shop", 1234, 2), start.Run.RunID)
	require.Equal(t, time.UTC, start.EventTime.Location())
	require.Equal(t, Job{Namespace: "shop", Name: "shop.orders", Facets: JobFacets{JobType: LoadJobType(DefaultProducer)}}, start.Job)
	require.Equal(t, "BATCH", start.Job.Facets.JobType.ProcessingType)
	require.Equal(t, "idem", start.Job.Facets.JobType.Integration)
	require.Equal(t, "LOAD", start.Job.Facets.JobType.JobType)

	require.Equal(t, []InputDataset{
		{Dataset: Dataset{"postgres://db.example.com:6543", "warehouse.staging.customers"}},
		{Dataset: Dataset{"postgres://db.example.com:6543", "warehouse.staging.orders"}},
	}, start.Inputs)
	require.Len(t, done.Outputs, 1)
	out := done.Outputs[0]
	require.Equal(t, Dataset{"postgres://db.example.com:6543", "warehouse.analytics.fact_orders"}, out.Dataset)
	require.Equal(t, int64(42), out.OutputFacets.OutputStatistics.RowCount)
	require.Equal(t, sampleChecks, out.Facets.DataQualityAssertions.Assertions)
	require.Nil(t, start.Outputs[0].OutputFacets.OutputStatistics, "nothing is written yet")

	nt := start.Run.Facets.NominalTime
	require.Equal(t, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), nt.NominalStartTime)
	require.Equal(t, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), *nt.NominalEndTime)
	require.Equal(t, &IdemRunFacet{BaseFacet{DefaultProducer, IdemRunFacetSchemaURL}, "2026-11-28", "scheduled__2026-11-28", 1234, 2, nil}, start.Run.Facets.Idem)

	p := start.Run.Facets.Parent
	require.Equal(t, "airflow", p.Job.Namespace)
	require.Equal(t, "shop_daily.load_orders", p.Job.Name)
	require.Equal(t, "01890a5d-ac96-774b-bcce-b302099a8057", p.Run.RunID)
	require.Equal(t, "shop_daily", p.Root.Job.Name)

	fail := a.Fail(sampleTime, "boom", nil)
	require.Equal(t, "boom", fail.Run.Facets.ErrorMessage.Message)
	require.Equal(t, "GO", fail.Run.Facets.ErrorMessage.ProgrammingLanguage)
	require.Nil(t, start.Run.Facets.ErrorMessage)
	require.Equal(t, Abort, a.Abort(sampleTime).EventType)

	text := a
	text.Partition = mustPartition(schemas.PartitionText, "eu-west")
	require.Nil(t, text.Start(sampleTime).Run.Facets.NominalTime, "a text partition names no time")
	hour := a
	hour.Partition = mustPartition(schemas.PartitionHour, "2026-11-28T13")
	nt = hour.Start(sampleTime).Run.Facets.NominalTime
	require.Equal(t, time.Hour, nt.NominalEndTime.Sub(nt.NominalStartTime))
}

// TestHostileStringsStayData: quotes, a closing script tag, newlines and
// invalid UTF-8 in anything an event carries come out as JSON strings:
// the document parses to the same structure, and no raw markup survives.
func TestHostileStringsStayData(t *testing.T) {
	t.Parallel()
	hostile := "x\"},\"eventType\":\"COMPLETE\"</script><script>alert(1)</script>\n\r\t\u2028\xff\xfe'--"
	a := sampleAttempt()
	a.EventRunID = hostile
	a.Dataset = hostile
	a.Pipeline = hostile
	a.Namespace = hostile
	a.Output = Dataset{Namespace: hostile, Name: hostile}
	a.Inputs = []InputDataset{{Dataset: Dataset{Namespace: hostile, Name: hostile}}}
	a.Parent = &Parent{RunRef: RunRef{Namespace: hostile, Name: hostile, RunID: "01890a5d-ac96-774b-bcce-b302099a8057"}}

	for _, ev := range []RunEvent{a.Fail(sampleTime, hostile, []Assertion{{Assertion: hostile, Name: hostile, Actual: hostile}}), a.Start(sampleTime)} {
		body, err := ev.Marshal()
		require.NoError(t, err)
		validateEvent(t, body)
		require.NotContains(t, string(body), "</script>")
		require.NotContains(t, string(body), "<script>")
		require.NotContains(t, string(body), "\n", "one line: a newline is escaped")
		require.True(t, json.Valid(body))

		var got map[string]any
		require.NoError(t, json.Unmarshal(body, &got))
		require.Equal(t, string(ev.EventType), got["eventType"], "the string did not close the document's")
		run := got["run"].(map[string]any)
		want := string([]rune(hostile)) // each invalid byte becomes U+FFFD, as encoding/json writes it
		require.Equal(t, want, run["facets"].(map[string]any)["idem_run"].(map[string]any)["runId"])
		require.Equal(t, want+"."+want, got["job"].(map[string]any)["name"])
		if ev.EventType == Fail {
			require.Equal(t, want, run["facets"].(map[string]any)["errorMessage"].(map[string]any)["message"])
		}
		require.Equal(t, []string{"eventTime", "eventType", "inputs", "job", "outputs", "producer", "run", "schemaURL"}, slices.Sorted(maps.Keys(got)))
	}
}

func TestEventJSONShape(t *testing.T) {
	t.Parallel()
	// The exact document for one START, so a change of shape is seen in review.
	a := Attempt{
		Namespace: "shop", Pipeline: "shop", Dataset: "orders", AuditID: 7, Number: 1,
		Partition:  mustPartition(schemas.PartitionDate, "2026-11-28"),
		EventRunID: "r1",
		Inputs:     []InputDataset{{Dataset: Dataset{"postgres://db:5432", "w.staging.orders"}}},
		Output:     Dataset{"postgres://db:5432", "w.analytics.fact_orders"},
	}
	body, err := a.Start(time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)).Marshal()
	require.NoError(t, err)
	p := `"_producer":"https://github.com/idem-data/idem","_schemaURL":"https://openlineage.io/spec/facets/`
	require.JSONEq(t, `{
	  "eventType":"START","eventTime":"2026-11-29T01:00:00Z",
	  "producer":"https://github.com/idem-data/idem",
	  "schemaURL":"https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
	  "run":{"runId":"`+RunID("shop", "shop", 7, 1)+`","facets":{
	    "nominalTime":{`+p+`1-0-1/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet","nominalStartTime":"2026-11-28T00:00:00Z","nominalEndTime":"2026-11-29T00:00:00Z"},
	    "idem_run":{"_producer":"https://github.com/idem-data/idem","_schemaURL":"https://idem.dev/schemas/openlineage/1-1-0/IdemRunFacet.json#/$defs/IdemRunFacet","partition":"2026-11-28","runId":"r1","auditId":7,"attempt":1}}},
	  "job":{"namespace":"shop","name":"shop.orders","facets":{
	    "jobType":{`+p+`2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet","processingType":"BATCH","integration":"idem","jobType":"LOAD"}}},
	  "inputs":[{"namespace":"postgres://db:5432","name":"w.staging.orders"}],
	  "outputs":[{"namespace":"postgres://db:5432","name":"w.analytics.fact_orders"}]
	}`, string(body))
}

// TestSchemaFacetAndChanges: COMPLETE carries the target's columns as the
// output's schema facet and the attempt's schema changes in idem_run; FAIL
// the changes without the columns (nothing committed); START and ABORT
// neither.
func TestSchemaFacetAndChanges(t *testing.T) {
	t.Parallel()
	a := sampleAttempt()
	a.OutputColumns, a.SchemaChanges = sampleColumns, sampleChanges

	done := a.Complete(sampleTime, 42, nil)
	require.Equal(t, &SchemaDatasetFacet{BaseFacet{DefaultProducer, SchemaDatasetFacetSchemaURL}, sampleColumns}, done.Outputs[0].Facets.Schema)
	require.Equal(t, sampleChanges, done.Run.Facets.Idem.SchemaChanges)

	fail := a.Fail(sampleTime, "boom", nil)
	require.Nil(t, fail.Outputs[0].Facets.Schema, "a failed load committed no columns")
	require.Equal(t, sampleChanges, fail.Run.Facets.Idem.SchemaChanges)

	for _, ev := range []RunEvent{a.Start(sampleTime), a.Abort(sampleTime)} {
		require.Nil(t, ev.Outputs[0].Facets.Schema, ev.EventType)
		require.Nil(t, ev.Run.Facets.Idem.SchemaChanges, ev.EventType)
	}

	// None known, none met: both left out of the document.
	body, err := sampleAttempt().Complete(sampleTime, 1, nil).Marshal()
	require.NoError(t, err)
	require.NotContains(t, string(body), `"schema"`)
	require.NotContains(t, string(body), "schemaChanges")
}

func TestCompleteSchemaJSONShape(t *testing.T) {
	t.Parallel()
	// The exact output and idem_run of a COMPLETE that added a column.
	a := Attempt{
		Namespace: "shop", Pipeline: "shop", Dataset: "orders", AuditID: 7, Number: 1,
		Partition:  mustPartition(schemas.PartitionText, "eu"),
		EventRunID: "r1",
		Output:     Dataset{"postgres://db:5432", "w.analytics.fact_orders"},
		OutputColumns: []SchemaField{
			{Name: "id", Type: "bigint", OrdinalPosition: 1},
			{Name: "channel", Type: "text", OrdinalPosition: 2},
		},
		SchemaChanges: []SchemaChange{{Column: "channel", Change: "new_column", Action: "added", NewType: "text", Policy: "append_new_columns"}},
	}
	body, err := a.Complete(time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC), 3, nil).Marshal()
	require.NoError(t, err)
	var got struct {
		Run struct {
			Facets struct {
				Idem json.RawMessage `json:"idem_run"`
			} `json:"facets"`
		} `json:"run"`
		Outputs json.RawMessage `json:"outputs"`
	}
	require.NoError(t, json.Unmarshal(body, &got))
	p := `"_producer":"https://github.com/idem-data/idem","_schemaURL":"https://openlineage.io/spec/facets/`
	require.JSONEq(t, `[{"namespace":"postgres://db:5432","name":"w.analytics.fact_orders",
	  "facets":{"schema":{`+p+`1-2-0/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet","fields":[
	    {"name":"id","type":"bigint","ordinal_position":1},
	    {"name":"channel","type":"text","ordinal_position":2}]}},
	  "outputFacets":{"outputStatistics":{`+p+`1-0-2/OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet","rowCount":3}}}]`, string(got.Outputs))
	require.JSONEq(t, `{"_producer":"https://github.com/idem-data/idem","_schemaURL":"https://idem.dev/schemas/openlineage/1-1-0/IdemRunFacet.json#/$defs/IdemRunFacet",
	  "partition":"eu","runId":"r1","auditId":7,"attempt":1,
	  "schemaChanges":[{"column":"channel","change":"new_column","action":"added","newType":"text","policy":"append_new_columns"}]}`, string(got.Run.Facets.Idem))
	validateEvent(t, body)
}

// A files dataset's COMPLETE reads one more input, the partition's prefix,
// named as OpenLineage names object storage and local files, with the
// files the load read in its idem_files facet; START names none yet.
func TestCompleteNamesTheFilesRead(t *testing.T) {
	t.Parallel()
	mod := sampleTime.Add(-time.Hour)
	for _, c := range []struct {
		prefix string
		want   Dataset
		file   IdemFile
	}{
		{"s3://landing/orders/dt=2026-11-28/", Dataset{"s3://landing", "orders/dt=2026-11-28/"},
			IdemFile{URL: "s3://landing/orders/dt=2026-11-28/part-0001.csv", Size: 2048, ETag: `"9b2cf535f27731c974343645a3985328"`, VersionID: "v1", Rows: 10}},
		{"file:///srv/landing/dt=2026-11-28/", Dataset{"file", "/srv/landing/dt=2026-11-28/"},
			IdemFile{URL: "file:///srv/landing/dt=2026-11-28/part-0001.csv", Size: 17, Modified: &mod, SHA256: strings.Repeat("ab", 32), Rows: 2}},
	} {
		a := sampleAttempt()
		a.Files = &FilesRead{Prefix: c.prefix, Fingerprint: "f00d", Files: []IdemFile{c.file}}
		start, done := a.Start(sampleTime), a.Complete(sampleTime.Add(time.Minute), 10, nil)
		require.Equal(t, a.Inputs, start.Inputs, "START: the load has read nothing yet")
		require.Len(t, done.Inputs, len(a.Inputs)+1)
		in := done.Inputs[len(done.Inputs)-1]
		require.Equal(t, c.want, in.Dataset)
		require.Equal(t, "f00d", in.InputFacets.Files.Fingerprint)
		require.Equal(t, []IdemFile{c.file}, in.InputFacets.Files.Files)
		require.Len(t, a.Inputs, 2, "the attempt's own inputs are not appended to")
		for _, ev := range []RunEvent{start, done} {
			body, err := ev.Marshal()
			require.NoError(t, err)
			validateEvent(t, body)
		}
	}
}
