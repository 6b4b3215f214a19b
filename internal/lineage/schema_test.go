package lineage

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// olSchemas compiles the vendored OpenLineage schemas and idem's facet
// schema, each registered under its $id so that no schema is fetched.
var olSchemas = sync.OnceValues(func() (*schemaSet, error) {
	files, err := filepath.Glob("testdata/openlineage/*.json")
	if err != nil {
		return nil, err
	}
	facets, err := filepath.Glob("testdata/openlineage/facets/*.json")
	if err != nil {
		return nil, err
	}
	files = append(append(files, facets...), "IdemRunFacet.json")
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	set := &schemaSet{c: c, docs: map[string]map[string]any{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		id, _ := doc.(map[string]any)["$id"].(string)
		if id == "" {
			return nil, os.ErrInvalid
		}
		if err := c.AddResource(id, doc); err != nil {
			return nil, err
		}
		set.docs[id] = doc.(map[string]any)
	}
	return set, nil
})

type schemaSet struct {
	mu   sync.Mutex
	c    *jsonschema.Compiler
	docs map[string]map[string]any // by $id
}

func (s *schemaSet) compile(t *testing.T, url string) *jsonschema.Schema {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	sch, err := s.c.Compile(url)
	require.NoError(t, err, url)
	return sch
}

// facetBases is the base definition each slot's facets must extend.
var facetBases = map[string][]string{
	"run":          {"#/$defs/RunFacet"},
	"job":          {"#/$defs/JobFacet"},
	"outputFacets": {"#/$defs/OutputDatasetFacet"},
	// dataQualityAssertions is typed as an input facet by the spec; idem
	// puts it in its target's dataset facets (see the package doc).
	"dataset": {"#/$defs/DatasetFacet", "#/$defs/InputDatasetFacet"},
}

// validateEvent checks an event's JSON against the RunEvent schema and each
// facet against its own schema, the one its _schemaURL names, under the key
// that schema defines.
func validateEvent(t *testing.T, body []byte) {
	t.Helper()
	set, err := olSchemas()
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err)
	require.NoError(t, set.compile(t, RunEventSchemaURL).Validate(inst), "event %s", body)
	require.NoError(t, set.compile(t, "https://openlineage.io/spec/2-0-2/OpenLineage.json").Validate(inst), "event %s", body)

	ev := inst.(map[string]any)
	check := func(slot string, facets any) {
		m, _ := facets.(map[string]any)
		for key, f := range m {
			facet := f.(map[string]any)
			url, _ := facet["_schemaURL"].(string)
			docID, frag, ok := strings.Cut(url, "#")
			require.True(t, ok, "facet %s: _schemaURL %q has no fragment", key, url)
			doc, ok := set.docs[docID]
			require.True(t, ok, "facet %s: _schemaURL %q is not a vendored schema", key, url)
			props, _ := doc["properties"].(map[string]any)
			require.Contains(t, props, key, "facet %s: its schema %s defines no such key", key, docID)
			require.NoError(t, set.compile(t, url).Validate(f), "facet %s", key)
			require.NoError(t, set.compile(t, docID).Validate(map[string]any{key: f}), "facet %s", key)
			def := doc["$defs"].(map[string]any)[strings.TrimPrefix(frag, "/$defs/")].(map[string]any)
			base := def["allOf"].([]any)[0].(map[string]any)["$ref"].(string)
			_, baseFrag, _ := strings.Cut(base, "#")
			require.Contains(t, facetBases[slot], "#"+baseFrag, "facet %s in %s facets extends %s", key, slot, base)
		}
	}
	run := ev["run"].(map[string]any)
	check("run", run["facets"])
	check("job", ev["job"].(map[string]any)["facets"])
	for _, side := range []string{"inputs", "outputs"} {
		list, _ := ev[side].([]any)
		for _, d := range list {
			d := d.(map[string]any)
			check("dataset", d["facets"])
			check("outputFacets", d["outputFacets"])
			require.NotContains(t, d, "inputFacets", "idem emits no input facets")
		}
	}
}

// TestVendoredSchemaURLs holds the facets' schema URLs to the files in
// testdata: a URL whose file is missing would go unvalidated.
func TestVendoredSchemaURLs(t *testing.T) {
	t.Parallel()
	set, err := olSchemas()
	require.NoError(t, err)
	for _, url := range []string{RunEventSchemaURL, ParentRunFacetSchemaURL, NominalTimeRunFacetSchemaURL, ErrorMessageRunFacetSchemaURL,
		JobTypeJobFacetSchemaURL, OutputStatisticsSchemaURL, DataQualityAssertionsSchemaURL, IdemRunFacetSchemaURL} {
		id, _, _ := strings.Cut(url, "#")
		require.Contains(t, set.docs, id)
		set.compile(t, url)
	}
}

func TestSchemaRejectsWhatTheSpecForbids(t *testing.T) {
	t.Parallel()
	// The validator is only worth something if it can fail.
	ev := sampleAttempt().Start(sampleTime)
	ev.Run.RunID = "not-a-uuid"
	body, err := ev.Marshal()
	require.NoError(t, err)
	set, err := olSchemas()
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err)
	require.Error(t, set.compile(t, RunEventSchemaURL).Validate(inst))

	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	delete(m["job"].(map[string]any)["facets"].(map[string]any)["jobType"].(map[string]any), "_producer")
	require.Error(t, set.compile(t, RunEventSchemaURL).Validate(m), "a facet without _producer")
}
