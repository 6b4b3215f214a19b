// Package lineagetest validates OpenLineage run events against the
// published JSON schemas vendored in testdata/openlineage and idem's
// own facet schema, for the lineage package's tests and for the end-to-end
// tests that receive the events idem sends. It imports nothing of idem, so
// the lineage package's own tests can use it.
package lineagetest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// RunEventURL is the RunEvent definition of the OpenLineage version the
// schemas are vendored from.
const RunEventURL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"

// Set is the compiled schemas, by $id.
type Set struct {
	mu   sync.Mutex
	c    *jsonschema.Compiler
	Docs map[string]map[string]any // by $id
}

// dir is this package's directory, found from this file's path: the
// schemas are read from the source tree (testdata/openlineage beside this
// file, and idem's own facets in internal/lineage), never fetched.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

var schemas = sync.OnceValues(func() (*Set, error) {
	d := dir()
	files, err := filepath.Glob(filepath.Join(d, "testdata", "openlineage", "*.json"))
	if err != nil {
		return nil, err
	}
	facets, err := filepath.Glob(filepath.Join(d, "testdata", "openlineage", "facets", "*.json"))
	if err != nil {
		return nil, err
	}
	own, err := filepath.Glob(filepath.Join(d, "..", "..", "internal", "lineage", "*.json"))
	if err != nil {
		return nil, err
	}
	files = append(append(files, facets...), own...)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	set := &Set{c: c, Docs: map[string]map[string]any{}}
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
		set.Docs[id] = doc.(map[string]any)
	}
	return set, nil
})

// Schemas returns the compiled schemas.
func Schemas(t testing.TB) *Set {
	t.Helper()
	set, err := schemas()
	require.NoError(t, err)
	return set
}

// Compile compiles the schema at url (a vendored $id with a fragment).
func (s *Set) Compile(t testing.TB, url string) *jsonschema.Schema {
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
	"inputFacets":  {"#/$defs/InputDatasetFacet"},
	// dataQualityAssertions is typed as an input facet by the spec; idem
	// puts it in its target's dataset facets (see the lineage package doc).
	"dataset": {"#/$defs/DatasetFacet", "#/$defs/InputDatasetFacet"},
}

// Validate checks an event's JSON against the RunEvent schema and each
// facet against its own schema, the one its _schemaURL names, under the key
// that schema defines.
func Validate(t testing.TB, body []byte) {
	t.Helper()
	set := Schemas(t)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err)
	require.NoError(t, set.Compile(t, RunEventURL).Validate(inst), "event %s", body)
	docID, _, _ := strings.Cut(RunEventURL, "#")
	require.NoError(t, set.Compile(t, docID).Validate(inst), "event %s", body)

	ev := inst.(map[string]any)
	check := func(slot string, facets any) {
		m, _ := facets.(map[string]any)
		for key, f := range m {
			facet := f.(map[string]any)
			url, _ := facet["_schemaURL"].(string)
			docID, frag, ok := strings.Cut(url, "#")
			require.True(t, ok, "facet %s: _schemaURL %q has no fragment", key, url)
			doc, ok := set.Docs[docID]
			require.True(t, ok, "facet %s: _schemaURL %q is not a vendored schema", key, url)
			props, _ := doc["properties"].(map[string]any)
			require.Contains(t, props, key, "facet %s: its schema %s defines no such key", key, docID)
			require.NoError(t, set.Compile(t, url).Validate(f), "facet %s", key)
			require.NoError(t, set.Compile(t, docID).Validate(map[string]any{key: f}), "facet %s", key)
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
			check("inputFacets", d["inputFacets"])
		}
	}
}
