package lineage

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/lineagetest"
)

// validateEvent: every event validates against the vendored schemas
// (package lineagetest).
func validateEvent(t *testing.T, body []byte) {
	t.Helper()
	lineagetest.Validate(t, body)
}

// TestVendoredSchemaURLs holds the facets' schema URLs to the files in
// testdata: a URL whose file is missing would go unvalidated.
func TestVendoredSchemaURLs(t *testing.T) {
	t.Parallel()
	require.Equal(t, lineagetest.RunEventURL, RunEventSchemaURL, "the events' schema is the vendored one")
	set := lineagetest.Schemas(t)
	for _, url := range []string{RunEventSchemaURL, ParentRunFacetSchemaURL, NominalTimeRunFacetSchemaURL, ErrorMessageRunFacetSchemaURL,
		JobTypeJobFacetSchemaURL, OutputStatisticsSchemaURL, DataQualityAssertionsSchemaURL, SchemaDatasetFacetSchemaURL, IdemRunFacetSchemaURL} {
		id, _, _ := strings.Cut(url, "#")
		require.Contains(t, set.Docs, id)
		set.Compile(t, url)
	}
}

func TestSchemaRejectsWhatTheSpecForbids(t *testing.T) {
	t.Parallel()
	// The validator is only worth something if it can fail.
	ev := sampleAttempt().Start(sampleTime)
	ev.Run.RunID = "not-a-uuid"
	body, err := ev.Marshal()
	require.NoError(t, err)
	set := lineagetest.Schemas(t)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err)
	require.Error(t, set.Compile(t, RunEventSchemaURL).Validate(inst))

	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	delete(m["job"].(map[string]any)["facets"].(map[string]any)["jobType"].(map[string]any), "_producer")
	require.Error(t, set.Compile(t, RunEventSchemaURL).Validate(m), "a facet without _producer")

	// idem's facet holds its schema changes to their words.
	a := sampleAttempt()
	a.OutputColumns = []SchemaField{{Name: "c", Type: "text", OrdinalPosition: 1}}
	a.SchemaChanges = []SchemaChange{{Column: "c", Change: "new_column", Action: "added", NewType: "text", Policy: "append_new_columns"}}
	facets := func(a Attempt) (idem, schema map[string]any) {
		body, err := a.Complete(sampleTime, 1, nil).Marshal()
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(body, &m))
		return m["run"].(map[string]any)["facets"].(map[string]any)["idem_run"].(map[string]any),
			m["outputs"].([]any)[0].(map[string]any)["facets"].(map[string]any)["schema"].(map[string]any)
	}
	idem, schema := facets(a)
	require.NoError(t, set.Compile(t, IdemRunFacetSchemaURL).Validate(idem))
	require.NoError(t, set.Compile(t, SchemaDatasetFacetSchemaURL).Validate(schema))
	a.SchemaChanges[0].Change = "renamed"
	idem, _ = facets(a)
	require.Error(t, set.Compile(t, IdemRunFacetSchemaURL).Validate(idem), "a change idem does not name")

	// The schema facet's fields each need a name.
	delete(schema["fields"].([]any)[0].(map[string]any), "name")
	require.Error(t, set.Compile(t, SchemaDatasetFacetSchemaURL).Validate(schema), "a field without a name")
}
