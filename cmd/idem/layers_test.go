package main

// The layers of idem's packages, enforced: every import points down. The
// table below is the one docs/ARCHITECTURE.md draws; a package that is not
// in it fails the test until it is placed.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/idem-data/idem"

// layers lists idem's packages from the bottom up, by path inside the
// module (a trailing /... takes the folder's packages too). A package may
// import only packages of a lower layer: never one of its own layer (so
// handlers and consumer, siblings, never import each other), never one
// above.
var layers = []struct {
	name string
	pkgs []string
}{
	// The core: what an event is, how a partition is loaded, what happened.
	{"leaves: formats and pure helpers, no idem import", []string{
		"internal/calendar", "internal/clock", "internal/sqlcheck", "internal/tracing",
		"internal/deadletter", "internal/results", "internal/defaults", "internal/pgerr",
	}},
	{"schemas: the event", []string{"schemas"}},
	{"sources: where a partition's rows come from", []string{"sources/..."}},
	{"strategies: how a partition is loaded", []string{"strategies"}},
	{"audit: what happened", []string{"audit"}},
	{"the load's helpers", []string{"internal/checks", "internal/lineage"}},
	{"handlers and consumer: one event, one transaction; its delivery", []string{"handlers", "consumer"}},
	// The machinery: what runs the core, from the adapters up.
	{"adapters: config, connections, servers", []string{
		"internal/config", "internal/embeddednats", "internal/localpg",
		"internal/tracing/pgxtrace", "internal/resultstream",
	}},
	{"services beside the event's path", []string{
		"internal/natsconn", "internal/metrics", "internal/relay",
		"internal/backfill", "internal/watch", "internal/recheck", "internal/reverify", "internal/why",
	}},
	{"readers for people", []string{"internal/observer", "internal/statuspage"}},
	{"assembly: a running idem", []string{"internal/service"}},
	{"commands", []string{"internal/cli"}},
	{"programs", []string{"cmd/idem", "bench", "bench/chaos"}},
	{"program wrappers", []string{"bench/cmd/..."}},
}

// testOnly are the folders of rigs and suites no running idem links: they
// may import anything, and nothing but tests may import them.
var testOnly = []string{"testkit/...", "e2e/..."}

// forbiddenDeps are links the layers alone would let through a chain of
// allowed imports: package → what it must never link, at any depth, and why.
var forbiddenDeps = []struct {
	pkg, dep, why string
}{
	{"consumer", "github.com/jackc/pgx/...", "the consumer knows nothing of PostgreSQL"},
	{"handlers", "github.com/nats-io/...", "the handlers never talk to NATS"},
	{"handlers", module + "/internal/config", "the handlers take plain values, never the YAML config"},
	{"strategies", "github.com/nats-io/...", "a strategy only sees the load's transaction"},
	{"audit", "github.com/nats-io/...", "the audit is PostgreSQL only"},
}

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// match says whether rel (a path inside the module) is named by pattern.
func match(pattern, rel string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == dir || strings.HasPrefix(rel, dir+"/")
	}
	return rel == pattern
}

// layerOf is rel's layer index, -1 for a test-only package, and false for
// a package in no layer.
func layerOf(rel string) (int, bool) {
	for _, p := range testOnly {
		if match(p, rel) {
			return -1, true
		}
	}
	for i, l := range layers {
		for _, p := range l.pkgs {
			if match(p, rel) {
				return i, true
			}
		}
	}
	return 0, false
}

func matchDep(pattern, dep string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return dep == dir || strings.HasPrefix(dep, dir+"/")
	}
	return dep == pattern
}

// violations lists every import of pkgs against the layers, and every
// forbidden link, each naming the import and the rule it breaks.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue
		}
		from, known := layerOf(rel)
		if !known {
			out = append(out, fmt.Sprintf("%s is in no layer: place it in cmd/idem/layers_test.go and docs/ARCHITECTURE.md", rel))
			continue
		}
		for _, imp := range p.Imports {
			irel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			to, known := layerOf(irel)
			switch {
			case !known:
				continue // reported as a package of its own
			case to == -1 && from != -1:
				out = append(out, fmt.Sprintf("%s imports %s: only tests may import the test rigs (testkit/, e2e/)", rel, irel))
			case from == -1:
				// a rig or a suite may use anything
			case to == from:
				out = append(out, fmt.Sprintf("%s imports %s: both are in layer %q, and a package imports only lower layers", rel, irel, layers[from].name))
			case to > from:
				out = append(out, fmt.Sprintf("%s (layer %q) imports %s (layer %q): imports point down the layers, never up", rel, layers[from].name, irel, layers[to].name))
			}
		}
		for _, f := range forbiddenDeps {
			if rel != f.pkg {
				continue
			}
			for _, d := range p.Deps {
				if matchDep(f.dep, d) {
					out = append(out, fmt.Sprintf("%s links %s: %s", rel, d, f.why))
					break
				}
			}
		}
	}
	return out
}

// list runs go list over the whole module, from its root.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; expected the whole module", len(pkgs))
	}
	return pkgs
}

func TestImportsPointDownTheLayers(t *testing.T) {
	for _, v := range violations(list(t)) {
		t.Error(v)
	}
}

// The checker itself: each rule catches what it names.
func TestLayerRulesCatchEachKind(t *testing.T) {
	p := func(rel string, imports ...string) pkg {
		q := pkg{ImportPath: path.Join(module, rel)}
		for _, i := range imports {
			if strings.Contains(i, ".") {
				q.Deps = append(q.Deps, i) // a module outside idem
				continue
			}
			q.Imports = append(q.Imports, path.Join(module, i))
			q.Deps = append(q.Deps, path.Join(module, i))
		}
		return q
	}
	cases := []struct {
		pkg  pkg
		want string
	}{
		{p("handlers", "audit", "strategies"), ""},
		{p("strategies", "handlers"), "imports point down the layers, never up"},
		{p("consumer", "handlers"), `both are in layer`},
		{p("handlers", "internal/config"), "never up"},
		{p("internal/deadletter", "internal/tracing"), "both are in layer"},
		{p("internal/relay", "testkit/pgtest"), "only tests may import the test rigs"},
		{p("testkit/pgtest", "internal/localpg"), ""},
		{p("internal/newthing"), "is in no layer"},
		{p("consumer", "github.com/jackc/pgx/v5/pgconn"), "the consumer knows nothing of PostgreSQL"},
		{p("handlers", "github.com/nats-io/nats.go"), "the handlers never talk to NATS"},
	}
	for _, c := range cases {
		got := violations([]pkg{c.pkg})
		if c.want == "" {
			if len(got) != 0 {
				t.Errorf("%s: unexpected %q", c.pkg.ImportPath, got)
			}
			continue
		}
		if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, c.want) }) {
			t.Errorf("%s: got %q, want a violation saying %q", c.pkg.ImportPath, got, c.want)
		}
	}
}
