package statuspage

// docs/api/openapi.yaml against the code: every answer a test reads goes
// through apiDo, which validates its body against the schema the document
// gives for its path, method and status; TestOpenAPIMatchesTheRoutes holds
// the document's paths and the routes to each other.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const openAPIPath = "../../docs/api/openapi.yaml"

// openAPIURL names the document as a schema resource.
const openAPIURL = "file:///openapi.json"

type openAPI struct {
	doc  map[string]any
	c    *jsonschema.Compiler
	mu   sync.Mutex
	seen map[string]*jsonschema.Schema
}

var loadOpenAPI = sync.OnceValues(func() (*openAPI, error) {
	b, err := os.ReadFile(openAPIPath)
	if err != nil {
		return nil, err
	}
	var y any
	if err := yaml.Unmarshal(b, &y); err != nil {
		return nil, fmt.Errorf("%s: %w", openAPIPath, err)
	}
	// Through JSON, so the schema compiler sees JSON's types.
	j, err := json.Marshal(y)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return nil, err
	}
	if v, _ := doc.(map[string]any)["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		return nil, fmt.Errorf("%s: openapi %q, want 3.1.x (its schemas are JSON Schema 2020-12)", openAPIPath, v)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(openAPIURL, doc); err != nil {
		return nil, err
	}
	return &openAPI{doc: doc.(map[string]any), c: c, seen: map[string]*jsonschema.Schema{}}, nil
})

func mustOpenAPI(t *testing.T) *openAPI {
	t.Helper()
	o, err := loadOpenAPI()
	require.NoError(t, err)
	return o
}

// pointer is a JSON pointer to the document's node at path, as a URI fragment.
func pointer(path ...string) string {
	var b strings.Builder
	b.WriteString("#")
	for _, p := range path {
		b.WriteString("/" + url.PathEscape(strings.NewReplacer("~", "~0", "/", "~1").Replace(p)))
	}
	return b.String()
}

func (o *openAPI) node(path ...string) (any, bool) {
	var n any = o.doc
	for _, p := range path {
		m, ok := n.(map[string]any)
		if !ok {
			return nil, false
		}
		if n, ok = m[p]; !ok {
			return nil, false
		}
	}
	return n, true
}

// responseSchema finds where the document says the answer of route (a
// documented path) to method with code is, following a response $ref.
func (o *openAPI) responseSchema(route, method string, code int) (string, error) {
	at := []string{"paths", route, strings.ToLower(method), "responses", fmt.Sprint(code)}
	n, ok := o.node(at...)
	if !ok {
		return "", fmt.Errorf("%s %s answered %d, which the document does not list", method, route, code)
	}
	if ref, ok := n.(map[string]any)["$ref"].(string); ok {
		name, ok := strings.CutPrefix(ref, "#/components/responses/")
		if !ok {
			return "", fmt.Errorf("%s %s %d: $ref %s is not a component response", method, route, code, ref)
		}
		at = []string{"components", "responses", name}
	}
	at = append(at, "content", "application/json", "schema")
	if _, ok := o.node(at...); !ok {
		return "", fmt.Errorf("%s %s %d: no application/json schema", method, route, code)
	}
	return pointer(at...), nil
}

func (o *openAPI) validate(ptr string, body []byte) error {
	o.mu.Lock()
	s, ok := o.seen[ptr]
	if !ok {
		var err error
		if s, err = o.c.Compile(openAPIURL + ptr); err != nil {
			o.mu.Unlock()
			return fmt.Errorf("compile %s: %w", ptr, err)
		}
		o.seen[ptr] = s
	}
	o.mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w: %s", err, body)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("against %s: %w\n%s", ptr, err, body)
	}
	return nil
}

// answer is one HTTP answer of the API.
type answer struct {
	code   int
	header http.Header
	body   []byte
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(a.body, v), "%s", a.body)
}

func (a answer) errorText(t *testing.T) string {
	t.Helper()
	var e errorJSON
	a.decode(t, &e)
	require.NotEmpty(t, e.Error)
	return e.Error
}

// apiGet asks the API with GET and optional header name, value pairs.
func apiGet(t *testing.T, srv *httptest.Server, path string, header ...string) answer {
	t.Helper()
	return apiDo(t, srv, http.MethodGet, path, header...)
}

// apiDo asks srv and checks what every answer must be: JSON, without a
// CORS header, and as the document describes it for the route the request
// took (an unrouted path's error as the document's Error).
func apiDo(t *testing.T, srv *httptest.Server, method, path string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{code: resp.StatusCode, header: resp.Header, body: body}

	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%s %s", method, path)
	for k := range resp.Header {
		require.False(t, strings.HasPrefix(strings.ToLower(k), "access-control-"), "%s %s answered CORS header %s", method, path, k)
	}
	if method == http.MethodHead {
		return a
	}
	o := mustOpenAPI(t)
	ptr := pointer("components", "schemas", "Error")
	if route := documentedRoute(t, req); route != "" {
		ptr, err = o.responseSchema(route, method, a.code)
		require.NoError(t, err, "%s %s: %s", method, path, body)
	} else {
		require.GreaterOrEqual(t, a.code, 400, "%s %s is no route but answered %d", method, path, a.code)
	}
	require.NoError(t, o.validate(ptr, body), "%s %s", method, path)
	return a
}

// documentedRoute is the route pattern's path that req takes, or "" for
// the catch-all.
func documentedRoute(t *testing.T, req *http.Request) string {
	r := req.Clone(req.Context())
	r.Method = http.MethodGet // which route the path takes, whatever the method
	_, pattern := (&Page{}).apiMux().Handler(r)
	m, path, ok := strings.Cut(pattern, " ")
	if !ok {
		require.Equal(t, "/api/v1/", pattern, "an API route without a method")
		return ""
	}
	require.Equal(t, http.MethodGet, m)
	if req.Method != http.MethodGet {
		return "" // the catch-all answers every other method
	}
	return path
}

// Every path and method of the document is routed, and every route is
// documented.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	o := mustOpenAPI(t)
	var documented []string
	paths, _ := o.node("paths")
	for path, item := range paths.(map[string]any) {
		for method := range item.(map[string]any) {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	var routed []string
	for pattern := range (&Page{}).apiRoutes() {
		routed = append(routed, pattern)
	}
	sort.Strings(documented)
	sort.Strings(routed)
	require.Equal(t, routed, documented)

	// Each documented path, with its parameters filled, reaches its own
	// handler through Page.Handler, not the catch-all.
	w := newAPIWorld(t)
	srv := w.server(t, Deps{})
	for _, path := range documented {
		_, p, _ := strings.Cut(path, " ")
		u := strings.NewReplacer("{dataset}", "no-such-dataset", "{partition}", "2026-11-01").Replace(p) + "?from=2026-11-01&to=2026-11-02"
		a := apiGet(t, srv, u)
		require.Equal(t, http.StatusNotFound, a.code, u)
		require.Equal(t, `dataset "no-such-dataset" is not configured`, a.errorText(t), u)
	}
}

// The validation can fail: an answer the document does not describe is
// refused.
func TestOpenAPIRefusesWhatItDoesNotDescribe(t *testing.T) {
	o := mustOpenAPI(t)
	ptr, err := o.responseSchema("/api/v1/partitions/{dataset}/{partition}", http.MethodGet, http.StatusOK)
	require.NoError(t, err)
	require.Error(t, o.validate(ptr, []byte(`{"dataset":"a","partition":"b","status":"green"}`)))
	require.Error(t, o.validate(pointer("components", "schemas", "Error"), []byte(`{"error":"x","extra":1}`)))
	require.Error(t, o.validate(pointer("components", "schemas", "Error"), []byte(`{}`)))
	_, err = o.responseSchema("/api/v1/partitions/{dataset}/{partition}", http.MethodGet, http.StatusTeapot)
	require.Error(t, err)
}
