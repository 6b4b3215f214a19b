package config

// The generator of docs/CONFIGURATION.md. It reads the config's own
// definitions, never a hand-kept list of keys:
//
//   - the keys, their nesting and their types: the yaml tags of Config and of
//     every struct it holds, by reflection;
//   - what a key does: the doc comments of those structs and fields, parsed
//     from this package's source with go/ast (a field without a comment of
//     its own shares the comment of the field on the line above it);
//   - defaults: what WithDefaults fills in a config where every section is
//     present, plus the few defaults accessors apply where the value is used
//     (referenceImplicitDefaults);
//   - environment overrides: the variables applyEnv asks for, each set in
//     turn to see which key it fills;
//   - which dataset keys a strategy requires or refuses: Validate, asked
//     about a dataset of each strategy;
//   - the check kinds: the fields that make Check.Kinds report them.
//
// Only the page's introduction is written here by hand.

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// referenceEnums are the keys that take one of a few values, each listed
// with the constants the code compares it with. TestConfigReference checks
// that Validate accepts every value and refuses another.
var referenceEnums = map[string][]string{
	"datasets.<name>.strategy":             stringsOf(Strategies),
	"datasets.<name>.partition_type":       stringsOf([]schemas.PartitionType{schemas.PartitionDate, schemas.PartitionHour, schemas.PartitionText}),
	"datasets.<name>.expect.every":         stringsOf([]calendar.Every{calendar.Day, calendar.Hour}),
	"datasets.<name>.checks[].severity":    {SeverityError, SeverityWarn},
	"postgres.statement_mode":              {StatementAuto, StatementPrepare, StatementDescribe},
	"tracing.otlp.protocol":                {DefaultOTLPProtocol, "grpc"},
	"datasets.<name>.on_schema_change":     strategies.SchemaPolicies(),
	"defaults.on_schema_change":            strategies.SchemaPolicies(),
	"datasets.<name>.on_definition_change": {DefinitionChangeNone, DefinitionChangeReload},
}

// referenceImplicitDefaults are the defaults WithDefaults leaves zero
// because the code applies them where the value is used, each read from
// that code.
var referenceImplicitDefaults = map[string]func() any{
	"nats.duplicates":                                        func() any { return Duration((&NATS{}).DuplicateWindow()) },
	"nats.unknown_dataset_grace":                             func() any { return Duration((&NATS{}).UnknownGrace()) },
	"nats.fleet_bucket":                                      func() any { return (&NATS{Consumer: "<consumer>"}).FleetBucketName() },
	"postgres.reverify":                                      func() any { return Postgres{}.ReverifyOn() },
	"datasets.<name>.checks[].severity":                      func() any { return Check{}.SeverityOrDefault() },
	"datasets.<name>.on_definition_change":                   func() any { return (&Dataset{}).DefinitionChangePolicy() },
	"datasets.<name>.checks[].row_count_change.min_baseline": func() any { return DefaultMinBaseline },
}

// referenceIdents are the constants and variables that doc comments name,
// shown by their values. TestConfigReference fails when the page still
// names a constant or variable of this package.
var referenceIdents = map[string]any{
	"DefaultNATSURL":                 DefaultNATSURL,
	"DefaultS3Region":                DefaultS3Region,
	"DefaultWaitUpTo":                DefaultWaitUpTo,
	"DefaultRecoveryConflictRetries": DefaultRecoveryConflictRetries,
	"MaxWaitUpTo":                    MaxWaitUpTo,
	"DefaultStream":                  DefaultStream,
	"DefaultDLQStream":               DefaultDLQStream,
	"DefaultConsumer":                DefaultConsumer,
	"DefaultSubjectPrefix":           DefaultSubjectPrefix,
	"DefaultDLQSubjectPrefix":        DefaultDLQSubjectPrefix,
	"DefaultResultsStream":           DefaultResultsStream,
	"DefaultResultsSubjectPrefix":    DefaultResultsSubjectPrefix,
	"DefaultResultsMaxAge":           Duration(DefaultResultsMaxAge),
	"DefaultResultsMaxBytes":         DefaultResultsMaxBytes,
	"DefaultAckWait":                 Duration(DefaultAckWait),
	"DefaultDuplicates":              Duration(DefaultDuplicates),
	"DefaultDeadLetterDuplicates":    Duration(DefaultDeadLetterDuplicates),
	"DefaultUnknownDatasetGrace":     Duration(DefaultUnknownDatasetGrace),
	"DefaultMaxGroup":                DefaultMaxGroup,
	"DefaultMaxInFlight":             DefaultMaxInFlight,
	"DefaultBackfillShare":           DefaultBackfillShare,
	"DefaultReverifyWindow":          Duration(DefaultReverifyWindow),
	"DefaultHTTPAddr":                DefaultHTTPAddr,
	"MinHTTPTokenChars":              MinHTTPTokenChars,
	"MaxKeepVersions":                MaxKeepVersions,
	"DefaultRetries":                 DefaultRetries,
	"DefaultRetryDelay":              Duration(DefaultRetryDelay),
	"DefaultMaxRetryDelay":           Duration(DefaultMaxRetryDelay),
	"DefaultRunIDColumn":             DefaultRunIDColumn,
	"DefaultLoadSeqColumn":           DefaultLoadSeqColumn,
	"DefaultSchema":                  DefaultSchema,
	"DefaultAuditRetention":          DefaultAuditRetention,
	"StatementAuto":                  StatementAuto,
	"StatementPrepare":               StatementPrepare,
	"StatementDescribe":              StatementDescribe,
	"DefaultOpenLineageEndpoint":     DefaultOpenLineageEndpoint,
	"DefaultOpenLineageTimeout":      Duration(DefaultOpenLineageTimeout),
	"DefaultOTLPProtocol":            DefaultOTLPProtocol,
	"DefaultSampleRatio":             DefaultSampleRatio,
	"DefaultMinBaseline":             DefaultMinBaseline,
	"Forever":                        Retention{},
	"DefaultWatchEvery":              DefaultWatchEvery,
	"MinWatchEvery":                  MinWatchEvery,
	"DefaultWatchLast":               DefaultWatchLast,
	"MaxWatchLast":                   MaxWatchLast,
	"DefaultWatchRetries":            DefaultWatchRetries,
	"MaxWatchRetries":                MaxWatchRetries,
	"DefaultWatchRetryAfter":         DefaultWatchRetryAfter,
	"MinWatchRetryAfter":             MinWatchRetryAfter,
	"MaxWatchRetryAfter":             MaxWatchRetryAfter,
	"DefaultRecheckEvery":            DefaultRecheckEvery,
	"MinRecheckEvery":                MinRecheckEvery,
	"MaxRecheckWindow":               MaxRecheckWindow,
}

// referenceExample is the page's minimal config; TestConfigReference
// checks that idem accepts it.
const referenceExample = `pipeline: shop
datasets:
  orders:
    strategy: delete_insert
    target: analytics.fact_orders
    partition_column: event_date
    source: SELECT * FROM staging.orders WHERE event_date = @partition
`

func stringsOf[S ~string](vs []S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// refKey is one row of the page: a YAML key and what the code says of it.
type refKey struct {
	Path    string // datasets.<name>.key
	Key     string // key
	Field   string // the Go field: Key
	Type    string
	Default string
	Env     string
	Doc     string // markdown
	Block   string // the block this key opens, if it opens one
	Bool    bool
}

// refBlock is one mapping of the config: a section of the page.
type refBlock struct {
	Path  string // "" at the top level
	Type  reflect.Type
	Intro string // markdown, from the type's doc comment
	Keys  []refKey
}

// refSource is what go/ast reads of this package's source.
type refSource struct {
	typeDocs  map[string]string
	fieldDocs map[string]map[string]string // type -> field -> comment
	values    map[string]bool              // package-level constants and variables
	funcs     map[string]bool              // functions and methods
}

func readSource(dir string) (*refSource, error) {
	src := &refSource{typeDocs: map[string]string{}, fieldDocs: map[string]map[string]string{}, values: map[string]bool{}, funcs: map[string]bool{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				src.funcs[d.Name.Name] = true
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							src.values[n.Name] = true
						}
					case *ast.TypeSpec:
						doc := s.Doc
						if doc == nil && d.Lparen == 0 {
							doc = d.Doc
						}
						src.typeDocs[s.Name.Name] = doc.Text()
						if st, ok := s.Type.(*ast.StructType); ok {
							src.fieldDocs[s.Name.Name] = fieldDocs(fset, st)
						}
					}
				}
			}
		}
	}
	return src, nil
}

// fieldDocs reads each field's comment; a field without one shares the
// comment of the field on the line right above it (User and Password).
func fieldDocs(fset *token.FileSet, st *ast.StructType) map[string]string {
	out := map[string]string{}
	prevDoc, prevEnd := "", -1
	for _, f := range st.Fields.List {
		doc := f.Doc.Text()
		if doc == "" {
			doc = f.Comment.Text()
		}
		if doc == "" && fset.Position(f.Pos()).Line == prevEnd+1 {
			doc = prevDoc
		}
		for _, n := range f.Names {
			out[n.Name] = doc
		}
		prevDoc, prevEnd = doc, fset.Position(f.End()).Line
	}
	return out
}

// refGen builds the page.
type refGen struct {
	src       *refSource
	blocks    []*refBlock
	typePaths map[string]string // Go type name -> YAML path of its block
	defaults  map[string]string
	env       map[string]string
	kinds     map[string]bool // the kind fields of Check, by YAML key
}

var (
	durationType    = reflect.TypeFor[Duration]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

// referenceMarkdown generates docs/CONFIGURATION.md from the source in dir
// (this package's directory) and the compiled definitions.
func referenceMarkdown(dir string) ([]byte, []*refBlock, error) {
	src, err := readSource(dir)
	if err != nil {
		return nil, nil, err
	}
	g := &refGen{src: src, typePaths: map[string]string{}, kinds: checkKinds()}
	g.collect(reflect.TypeFor[Config](), "")
	g.defaults = referenceDefaults()
	g.env = referenceEnv()
	for _, b := range g.blocks {
		if b.Path != "" {
			b.Intro = g.markdown(src.typeDocs[b.Type.Name()], b.Type)
		}
		for i := range b.Keys {
			g.describe(b, &b.Keys[i])
		}
	}
	keys, cells, err := strategyMatrix()
	if err != nil {
		return nil, nil, err
	}
	return g.render(keys, cells), g.blocks, nil
}

func yamlKey(f reflect.StructField) string {
	k, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if k == "-" {
		return ""
	}
	return k
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// isMapping reports whether t is written as a YAML mapping of keys (a
// struct that does not parse itself from a scalar, as Retention does).
func isMapping(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// collect walks the struct t, at path, into blocks: its own first, then
// the blocks of its keys, in field order.
func (g *refGen) collect(t reflect.Type, path string) {
	b := &refBlock{Path: path, Type: t}
	g.blocks = append(g.blocks, b)
	g.typePaths[t.Name()] = path
	type sub struct {
		t    reflect.Type
		path string
	}
	var subs []sub
	for f := range t.Fields() {
		key := yamlKey(f)
		if key == "" {
			continue
		}
		p := join(path, key)
		k := refKey{Path: p, Key: key, Field: f.Name, Type: g.typeName(p, f.Type), Bool: deref(f.Type).Kind() == reflect.Bool}
		var bt reflect.Type
		switch ft := deref(f.Type); {
		case isMapping(ft):
			k.Block, bt = p, ft
		case ft.Kind() == reflect.Map && isMapping(deref(ft.Elem())):
			k.Block, bt = p+".<name>", deref(ft.Elem())
		case ft.Kind() == reflect.Slice && isMapping(deref(ft.Elem())):
			k.Block, bt = p+"[]", deref(ft.Elem())
		}
		if bt != nil {
			subs = append(subs, sub{bt, k.Block})
		}
		b.Keys = append(b.Keys, k)
	}
	for _, s := range subs {
		g.collect(s.t, s.path)
	}
}

func (g *refGen) typeName(path string, t reflect.Type) string {
	if vals, ok := referenceEnums[path]; ok {
		return "one of " + codeList(vals)
	}
	t = deref(t)
	switch t {
	case durationType:
		return "duration"
	case reflect.TypeFor[Retention]():
		return "retention"
	case reflect.TypeFor[Percent]():
		return "percentage"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		if isMapping(deref(t.Elem())) {
			return "list of mappings"
		}
		return "list of " + g.typeName("", t.Elem()) + "s"
	case reflect.Map:
		if isMapping(deref(t.Elem())) {
			return "mapping of names to mappings"
		}
		return "mapping of " + g.typeName("", t.Elem()) + "s"
	case reflect.Struct:
		return "mapping"
	}
	return t.String()
}

func codeList(vals []string) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = code(v)
	}
	return strings.Join(out, ", ")
}

// code is s as a markdown code span.
func code(s string) string {
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

// describe fills a key's default, environment variable and description.
func (g *refGen) describe(b *refBlock, k *refKey) {
	if d, ok := g.defaults[k.Path]; ok {
		k.Default = d
	} else if k.Bool {
		k.Default = code("false")
	}
	if e, ok := g.env[k.Path]; ok {
		k.Env = code(e)
	}
	doc := g.src.fieldDocs[b.Type.Name()][k.Field]
	var fieldType reflect.Type
	if f, ok := b.Type.FieldByName(k.Field); ok {
		fieldType = deref(f.Type)
	}
	if doc == "" && fieldType != nil && isMapping(fieldType) {
		// The type's comment, naming the key rather than the whole path.
		k.Doc = g.text(g.src.typeDocs[fieldType.Name()], fieldType)
		if rest, ok := strings.CutPrefix(k.Doc, code(k.Block)); ok {
			k.Doc = code(k.Key) + rest
		}
	} else {
		k.Doc = g.text(doc, b.Type)
	}
	if b.Type == reflect.TypeFor[Check]() && g.kinds[k.Key] {
		kind := "A check kind (one per list item)."
		if k.Doc != "" {
			kind += " " + k.Doc
		}
		if ex := exampleLine(g.src.typeDocs["Check"], k.Key); ex != "" {
			kind += " E.g. " + code(ex) + "."
		}
		k.Doc = kind
	}
	if k.Block != "" {
		k.Doc = strings.TrimSpace(k.Doc + " See " + link(k.Block) + ".")
	}
}

// exampleLine finds the line of a type doc's code block that sets key.
func exampleLine(doc, key string) string {
	re := regexp.MustCompile(`^\s*-?\s*` + regexp.QuoteMeta(key) + `:`)
	var p comment.Parser
	for _, blk := range p.Parse(doc).Content {
		if c, ok := blk.(*comment.Code); ok {
			for l := range strings.SplitSeq(c.Text, "\n") {
				if re.MatchString(l) {
					return strings.TrimPrefix(strings.TrimSpace(l), "- ")
				}
			}
		}
	}
	return ""
}

// checkKinds finds the fields of Check that are check kinds: set alone,
// each makes Kinds report its own key.
func checkKinds() map[string]bool {
	out := map[string]bool{}
	for f := range reflect.TypeFor[Check]().Fields() {
		var c Check
		sample(reflect.ValueOf(&c).Elem().FieldByIndex(f.Index), "x")
		if k := c.Kinds(); len(k) == 1 && k[0] == yamlKey(f) {
			out[yamlKey(f)] = true
		}
	}
	return out
}

// slug is the anchor GitHub gives a heading (as internal/cli's docs test
// computes it).
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r > 0x7f:
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func heading(path string) string {
	if path == "" {
		return "Top level"
	}
	return code(path)
}

func link(path string) string { return "[" + heading(path) + "](#" + slug(heading(path)) + ")" }

func (g *refGen) render(matrixKeys []string, matrix map[string]map[Strategy]string) []byte {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Configuration reference\n\n")
	w("<!-- Generated by `go test ./internal/config -run TestConfigReference -update` from internal/config: edit the doc comments there, not this page. -->\n\n")
	w("Every key of `idem.yaml`: its YAML path, its type, its default, the `IDEM_*` variable that overrides it, and what it does.\n\n")
	w("This page is generated from the configuration's own definitions in [internal/config](../internal/config): ")
	w("the structs' `yaml` tags and doc comments, the defaults `WithDefaults` applies, the environment variables `Load` reads, ")
	w("and what `idem validate` accepts. Regenerate it with `go test ./internal/config -run TestConfigReference -update`; ")
	w("the same test fails when the page and the code drift apart.\n\n")
	w("A minimal config: everything not written has a default, NATS is `%s` unless `nats.url` or `IDEM_NATS_URL` says otherwise, ", DefaultNATSURL)
	w("and the database URL can come from `IDEM_DATABASE_URL`:\n\n```yaml\n%s```\n\n", referenceExample)
	w("From a clone to that dataset loaded: [GETTING-STARTED.md](GETTING-STARTED.md#4-a-dataset-of-your-own). ")
	w("Which strategy to pick: [STRATEGIES.md](STRATEGIES.md); downstream datasets, checks and calendars: [PIPELINES.md](PIPELINES.md).\n\n")
	w("`<name>` stands for a dataset's name (its key under `datasets`), `[]` for each item of a list. ")
	w("A zero duration or count written in YAML means the default. `idem validate` reports every problem at once, naming the key.\n\n")
	w("## Contents\n\n")
	for _, blk := range g.blocks {
		w("- %s\n", link(blk.Path))
		if blk.Type == reflect.TypeFor[Dataset]() {
			w("  - [Keys by strategy](#keys-by-strategy)\n")
		}
	}
	w("- [Value types](#value-types)\n\n")
	for _, blk := range g.blocks {
		w("## %s\n\n", heading(blk.Path))
		if blk.Intro != "" {
			w("%s\n\n", blk.Intro)
		}
		withEnv := slices.ContainsFunc(blk.Keys, func(k refKey) bool { return k.Env != "" })
		if withEnv {
			w("| Key | Type | Default | Env | Description |\n|---|---|---|---|---|\n")
		} else {
			w("| Key | Type | Default | Description |\n|---|---|---|---|\n")
		}
		for _, k := range blk.Keys {
			desc := k.Doc
			if desc == "" {
				desc = "See above."
			}
			if withEnv {
				w("| %s | %s | %s | %s | %s |\n", code(k.Path), k.Type, k.Default, k.Env, desc)
			} else {
				w("| %s | %s | %s | %s |\n", code(k.Path), k.Type, k.Default, desc)
			}
		}
		w("\n")
		if blk.Type == reflect.TypeFor[Dataset]() {
			w("### Keys by strategy\n\n")
			w("What `idem validate` says of the keys that depend on `strategy` (every other key applies to every strategy); %s means Validate refuses the key for that strategy.\n\n", cellRefused)
			w("| Key |")
			for _, s := range Strategies {
				w(" %s |", code(string(s)))
			}
			w("\n|---|")
			for range Strategies {
				w("---|")
			}
			w("\n")
			for _, k := range matrixKeys {
				w("| %s |", code(k))
				for _, s := range Strategies {
					w(" %s |", matrix[k][s])
				}
				w("\n")
			}
			w("\n")
		}
	}
	w("## Value types\n\n")
	for _, t := range []reflect.Type{durationType, reflect.TypeFor[Retention](), reflect.TypeFor[Percent]()} {
		w("**%s**: %s\n\n", g.typeName("", t), g.markdown(g.src.typeDocs[t.Name()], nil))
	}
	return []byte(b.String())
}
