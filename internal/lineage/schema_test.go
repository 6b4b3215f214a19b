package lineage

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/lineage/lineagetest"
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
		JobTypeJobFacetSchemaURL, OutputStatisticsSchemaURL, DataQualityAssertionsSchemaURL, IdemRunFacetSchemaURL} {
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
}
