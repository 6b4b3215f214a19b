package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/schemas"
)

var update = flag.Bool("update", false, "write docs/CONFIGURATION.md from the config's definitions")

// referencePath is the generated page, from this package's directory.
const referencePath = "../../docs/CONFIGURATION.md"

const regenerate = "regenerate it: go test ./internal/config -run TestConfigReference -update"

// TestConfigReference: docs/CONFIGURATION.md is what the generator makes of
// the config's definitions today, and it documents every key.
func TestConfigReference(t *testing.T) {
	page, blocks, err := referenceMarkdown(".")
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(referencePath, page, 0o644))
		t.Logf("wrote %s", referencePath)
	}
	t.Run("up to date", func(t *testing.T) {
		onDisk, err := os.ReadFile(referencePath)
		if os.IsNotExist(err) {
			t.Fatalf("%s is missing; %s", referencePath, regenerate)
		}
		require.NoError(t, err)
		if !bytes.Equal(onDisk, page) {
			t.Fatalf("%s is out of date with internal/config (first difference: %s); %s", referencePath, firstDifference(onDisk, page), regenerate)
		}
	})
	rows := map[string]bool{}
	for _, b := range blocks {
		for _, k := range b.Keys {
			rows[k.Path] = true
		}
	}
	t.Run("every yaml key has a row", func(t *testing.T) {
		paths := yamlPaths(reflect.TypeFor[Config](), "")
		require.Greater(t, len(paths), 80, "so few keys: is the walk broken?")
		for _, p := range paths {
			require.Contains(t, string(page), "| "+code(p)+" |", "%s has no row on the page", p)
		}
	})
	t.Run("every key is described", func(t *testing.T) {
		intro := map[string]string{}
		for _, b := range blocks {
			intro[b.Path] = b.Intro
		}
		for _, b := range blocks {
			for _, k := range b.Keys {
				if k.Doc != "" {
					continue
				}
				// A small struct's fields may be described by its own
				// comment, or by its parent's example.
				around := intro[b.Path] + " " + intro[parentBlock(b.Path)]
				if !regexp.MustCompile(`(?i)\b` + regexp.QuoteMeta(k.Key) + `\b`).MatchString(around) {
					t.Errorf("%s is not described: write a doc comment on %s.%s in internal/config, then %s", k.Path, b.Type.Name(), k.Field, regenerate)
				}
			}
		}
	})
	t.Run("every key of the example configs is documented", func(t *testing.T) {
		examples := exampleConfigs(t)
		require.GreaterOrEqual(t, len(examples), 5, "so few example configs: is the search broken?")
		seen := 0
		for where, data := range examples {
			var root yaml.Node
			require.NoError(t, yaml.Unmarshal([]byte(data), &root), where)
			for _, p := range nodePaths(&root, reflect.TypeFor[Config](), "") {
				seen++
				if !rows[p] {
					t.Errorf("%s: %s is not on the page; %s", where, p, regenerate)
				}
			}
		}
		require.Greater(t, seen, 100)
	})
	t.Run("enums are what Validate accepts", func(t *testing.T) {
		for path, vals := range referenceEnums {
			probe, ok := enumProbes[path]
			require.True(t, ok, "referenceEnums[%s] has no enumProbes entry", path)
			require.True(t, rows[path], "referenceEnums names %s, which is not a key", path)
			for _, v := range append(slices.Clone(vals), "not-a-value") {
				c, err := Parse([]byte(referenceExample), nil)
				require.NoError(t, err)
				probe.set(c, v)
				refused := false
				if err := c.Validate(); err != nil {
					for _, p := range err.(Problems) {
						refused = refused || p.Field == probe.field
					}
				}
				require.Equal(t, v == "not-a-value", refused, "%s: %q", path, v)
			}
		}
	})
	t.Run("implicit defaults are not WithDefaults'", func(t *testing.T) {
		filled := withDefaultsFills()
		for path := range referenceImplicitDefaults {
			require.True(t, rows[path], "referenceImplicitDefaults names %s, which is not a key", path)
			require.NotContains(t, filled, path, "WithDefaults now fills %s: remove it from referenceImplicitDefaults", path)
		}
	})
	t.Run("the page names no Go constant", func(t *testing.T) {
		src, err := readSource(".")
		require.NoError(t, err)
		prose := regexp.MustCompile("(?s)```.*?```|`[^`]*`").ReplaceAllString(string(page), "")
		for _, w := range regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`).FindAllString(prose, -1) {
			if src.values[w] {
				t.Errorf("the page names the Go %s; add it to referenceIdents so the page shows its value", w)
			}
		}
	})
	t.Run("the minimal example is valid", func(t *testing.T) {
		c, err := Parse([]byte(referenceExample), nil)
		require.NoError(t, err)
		require.NoError(t, c.Validate())
	})
}

// enumProbes set each enum key of referenceEnums on a valid config, and
// name the field Validate reports when the value is refused.
var enumProbes = map[string]struct {
	set   func(c *Config, v string)
	field string
}{
	"datasets.<name>.strategy": {func(c *Config, v string) { c.Datasets["orders"].Strategy = Strategy(v) }, "strategy"},
	"datasets.<name>.partition_type": {func(c *Config, v string) {
		c.Datasets["orders"].PartitionType = schemas.PartitionType(v)
	}, "partition_type"},
	"datasets.<name>.expect.every": {func(c *Config, v string) {
		d := c.Datasets["orders"]
		d.Expect = &Expect{Every: v, From: "2026-01-01"}
		if v == string(calendar.Hour) {
			d.PartitionType, d.Expect.From = schemas.PartitionHour, "2026-01-01T00:00:00Z"
		}
	}, "expect"},
	"datasets.<name>.checks[].severity": {func(c *Config, v string) {
		c.Datasets["orders"].Checks = []Check{{Unique: []string{"order_id"}, Severity: v}}
	}, "checks[0].severity"},
	"postgres.statement_mode":              {func(c *Config, v string) { c.Postgres.StatementMode = v }, "postgres.statement_mode"},
	"datasets.<name>.on_schema_change":     {func(c *Config, v string) { c.Datasets["orders"].OnSchemaChange = v }, "on_schema_change"},
	"defaults.on_schema_change":            {func(c *Config, v string) { c.Defaults.OnSchemaChange = v }, "defaults.on_schema_change"},
	"datasets.<name>.on_definition_change": {func(c *Config, v string) { c.Datasets["orders"].OnDefinitionChange = v }, "on_definition_change"},
	"tracing.otlp.protocol": {func(c *Config, v string) {
		c.Tracing.OTLP = &OTLP{Endpoint: "http://otel-collector:4318", Protocol: v}
	}, "tracing.otlp.protocol"},
}

// yamlPaths lists every key under the struct t, walked independently of
// the generator.
func yamlPaths(t reflect.Type, path string) []string {
	var out []string
	for f := range t.Fields() {
		key := yamlKey(f)
		if key == "" {
			continue
		}
		p := join(path, key)
		out = append(out, p)
		switch ft := deref(f.Type); {
		case isMapping(ft):
			out = append(out, yamlPaths(ft, p)...)
		case ft.Kind() == reflect.Map && isMapping(deref(ft.Elem())):
			out = append(out, yamlPaths(deref(ft.Elem()), p+".<name>")...)
		case ft.Kind() == reflect.Slice && isMapping(deref(ft.Elem())):
			out = append(out, yamlPaths(deref(ft.Elem()), p+"[]")...)
		}
	}
	return out
}

// nodePaths lists the keys a YAML document sets, as the page writes them.
func nodePaths(n *yaml.Node, t reflect.Type, path string) []string {
	t = deref(t)
	switch {
	case n.Kind == yaml.DocumentNode:
		var out []string
		for _, c := range n.Content {
			out = append(out, nodePaths(c, t, path)...)
		}
		return out
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		var out []string
		for _, c := range n.Content {
			out = append(out, nodePaths(c, t.Elem(), path+"[]")...)
		}
		return out
	case n.Kind != yaml.MappingNode:
		return nil
	case t.Kind() == reflect.Map && isMapping(deref(t.Elem())):
		var out []string
		for i := 1; i < len(n.Content); i += 2 {
			out = append(out, nodePaths(n.Content[i], t.Elem(), path+".<name>")...)
		}
		return out
	case !isMapping(t):
		return nil
	}
	var out []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		for f := range t.Fields() {
			if yamlKey(f) == key {
				p := join(path, key)
				out = append(out, p)
				out = append(out, nodePaths(n.Content[i+1], f.Type, p)...)
			}
		}
	}
	return out
}

// exampleConfigs are the configs the repository shows: the test spec, the
// deploy and demo configs, and every YAML block of the docs that idem's
// strict decoder takes for a config.
func exampleConfigs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{"specYAML": specYAML, "referenceExample": referenceExample}
	for _, p := range []string{"../../deploy/idem.yaml", "../../internal/cli/devdata/idem.dev.yaml"} {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		out[p] = string(b)
	}
	pages, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	pages = append(pages, "../../README.md")
	block := regexp.MustCompile("(?s)```ya?ml\n(.*?)```")
	for _, p := range pages {
		if p == referencePath {
			continue
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for i, m := range block.FindAllStringSubmatch(string(b), -1) {
			if _, err := decode([]byte(m[1])); err == nil && strings.TrimSpace(m[1]) != "" {
				out[fmt.Sprintf("%s (yaml block %d)", p, i+1)] = m[1]
			}
		}
	}
	return out
}

func parentBlock(path string) string {
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[:i]
	}
	return ""
}

// firstDifference shows the first place where a and b differ.
func firstDifference(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x == y {
			continue
		}
		col := 0
		for col < len(x) && col < len(y) && x[col] == y[col] {
			col++
		}
		from := max(col-30, 0)
		around := func(s string) string { return s[min(from, len(s)):min(from+80, len(s))] }
		return fmt.Sprintf("line %d: the page has %q, the code makes %q", i+1, around(x), around(y))
	}
	return "none"
}
