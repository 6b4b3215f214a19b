package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the YAML config at path, strictly: an unknown key is an error
// naming its line and the closest known key. It then reads the secret files
// (password_file, token_file, url_file; a relative path is relative to the
// config file's folder), applies the IDEM_* environment overrides found
// through getenv (nil means none; pass os.Getenv in a program), and
// WithDefaults. It does not call Validate.
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(data, getenv, path, filepath.Dir(path))
}

// Parse is Load from bytes; relative secret-file paths are relative to the
// working directory.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	return parse(data, getenv, "config", "")
}

func parse(data []byte, getenv func(string) string, name, dir string) (*Config, error) {
	cfg, err := decode(data)
	if err != nil {
		return nil, prefixLines(name, err.Error())
	}
	if err := cfg.readSecretFiles(dir); err != nil {
		return nil, prefixLines(name, err.Error())
	}
	cfg.applyEnv(getenv)
	cfg.WithDefaults()
	return cfg, nil
}

// prefixLines puts name in front of every line of msg, so each problem reads
// alone in a log.
func prefixLines(name, msg string) error {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	for i, l := range lines {
		lines[i] = name + ": " + strings.TrimSpace(l)
	}
	return errors.New(strings.Join(lines, "\n"))
}

// decode parses data strictly into a Config. Errors hold one problem per
// line, each with its line number and key path.
func decode(data []byte) (*Config, error) {
	cfg := &Config{}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return cfg, nil // an empty file is an empty config; Validate says what is missing
		}
		return nil, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return nil, errors.New("holds more than one YAML document (a second ---); keep one")
	}
	paths := map[int]string{}
	keyPaths(&root, "", paths)

	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	err := strict.Decode(cfg)
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = explain(m, paths)
		}
		return nil, errors.New(strings.Join(msgs, "\n"))
	}
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return cfg, nil
}

// keyPaths records, for each line, the dotted path of the first key or list
// item on it (datasets.orders.key[0]), so decoder errors, which only know
// lines, can name the field. Aliases are not followed.
func keyPaths(n *yaml.Node, path string, out map[int]string) {
	set := func(line int, p string) {
		if _, ok := out[line]; !ok {
			out[line] = p
		}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			keyPaths(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			set(k.Line, p)
			keyPaths(v, p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			set(c.Line, p)
			keyPaths(c, p, out)
		}
	}
}

var (
	lineRE     = regexp.MustCompile(`^line (\d+): (.*)$`)
	notFoundRE = regexp.MustCompile(`^field (.+) not found in type (\S+)$`)
	unmarshRE  = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
)

// explain rewrites one yaml.v3 type error ("line 7: field partiton_column not
// found in type config.Dataset") into ours ("line 7:
// datasets.orders.partiton_column: unknown key; did you mean
// "partition_column"?").
func explain(msg string, paths map[int]string) string {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	line, _ := strconv.Atoi(m[1])
	rest := m[2]
	where := "line " + m[1]
	if p, ok := paths[line]; ok {
		where += ": " + p
	}
	if f := notFoundRE.FindStringSubmatch(rest); f != nil {
		return where + ": " + unknownKey(f[1], knownKeys[f[2]])
	}
	if u := unmarshRE.FindStringSubmatch(rest); u != nil {
		return where + ": " + wantType(u[3], u[1], u[2])
	}
	return where + ": " + rest
}

func unknownKey(key string, known []string) string {
	msg := fmt.Sprintf("unknown key %q", key)
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return msg + fmt.Sprintf("; did you mean %q?", best)
	}
	if len(known) > 0 {
		return msg + "; known keys here: " + strings.Join(known, ", ")
	}
	return msg
}

// wantType says what a field wanted, in the user's words.
func wantType(goType, tag, value string) string {
	var want string
	switch {
	case goType == "int" || goType == "*int":
		want = "a whole number"
	case goType == "bool":
		want = "true or false"
	case strings.HasPrefix(goType, "[]"):
		want = "a list, e.g. [a, b]"
	case strings.HasPrefix(goType, "map["):
		want = "a mapping of dataset names to datasets"
	case strings.HasPrefix(goType, "config.") && goType != "config.Strategy" || strings.HasPrefix(goType, "*config."):
		want = "a mapping of keys"
	default:
		want = "a single value"
	}
	found := map[string]string{"seq": "a list", "map": "a mapping", "str": "text", "int": "a number", "float": "a number", "bool": "a boolean"}[tag]
	if found == "" {
		found = "!!" + tag
	}
	if value != "" && tag != "seq" && tag != "map" {
		return fmt.Sprintf("want %s, found %s %q", want, found, value)
	}
	return fmt.Sprintf("want %s, found %s", want, found)
}

// knownKeys maps the type names yaml.v3 prints to the keys they accept.
var knownKeys = func() map[string][]string {
	out := map[string][]string{}
	for _, v := range []any{Config{}, NATS{}, TLS{}, Postgres{}, HTTP{}, Audit{}, Dataset{}, Expect{}, Lineage{}, OpenLineage{}, Tracing{}, OTLP{}} {
		t := reflect.TypeOf(v)
		var keys []string
		for i := 0; i < t.NumField(); i++ {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if tag != "" && tag != "-" {
				keys = append(keys, tag)
			}
		}
		sort.Strings(keys)
		out[t.String()] = keys
	}
	return out
}()

// editDistance is the Levenshtein distance between short keys.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// secretFile is a field whose value can come from a file instead.
type secretFile struct {
	field, fileField string
	value, file      *string
}

func (c *Config) secretFiles() []secretFile {
	files := []secretFile{
		{"nats.password", "nats.password_file", &c.NATS.Password, &c.NATS.PasswordFile},
		{"nats.token", "nats.token_file", &c.NATS.Token, &c.NATS.TokenFile},
		{"postgres.url", "postgres.url_file", &c.Postgres.URL, &c.Postgres.URLFile},
		{"http.token", "http.token_file", &c.HTTP.Token, &c.HTTP.TokenFile},
	}
	if ol := c.Lineage.OpenLineage; ol != nil {
		files = append(files, secretFile{"lineage.openlineage.api_key", "lineage.openlineage.api_key_file", &ol.APIKey, &ol.APIKeyFile})
	}
	for _, name := range c.DatasetNames() {
		if d := c.Datasets[name]; d != nil && d.Source.Postgres != nil {
			p := d.Source.Postgres
			field := "datasets." + name + ".source.postgres.url"
			files = append(files, secretFile{field, field + "_file", &p.URL, &p.URLFile})
		}
	}
	return files
}

// readSecretFiles reads every *_file field into its value field. Only a
// trailing line break is trimmed: a secret may end in spaces.
func (c *Config) readSecretFiles(dir string) error {
	var msgs []string
	for _, s := range c.secretFiles() {
		if *s.file == "" {
			continue
		}
		if *s.value != "" {
			msgs = append(msgs, fmt.Sprintf("%s: set either %s or %s, not both", s.fileField, s.field, s.fileField))
			continue
		}
		path := *s.file
		if dir != "" && !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("%s: %v; create the file or fix the path", s.fileField, err))
			continue
		}
		v := strings.TrimRight(string(data), "\r\n")
		if v == "" {
			msgs = append(msgs, fmt.Sprintf("%s: %s is empty; write the secret into it", s.fileField, path))
			continue
		}
		*s.value = v
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "\n"))
	}
	return nil
}

// envOverrides maps each environment variable to the field it overrides.
func (c *Config) envOverrides() []struct {
	name  string
	field *string
} {
	return []struct {
		name  string
		field *string
	}{
		{"IDEM_PIPELINE", &c.Pipeline},
		{"IDEM_NATS_URL", &c.NATS.URL},
		{"IDEM_NATS_STREAM", &c.NATS.Stream},
		{"IDEM_NATS_DLQ_STREAM", &c.NATS.DLQStream},
		{"IDEM_NATS_RESULTS_STREAM", &c.NATS.Results.Stream},
		{"IDEM_NATS_CONSUMER", &c.NATS.Consumer},
		{"IDEM_NATS_CREDS", &c.NATS.Creds},
		{"IDEM_NATS_NKEY", &c.NATS.NKey},
		{"IDEM_NATS_USER", &c.NATS.User},
		{"IDEM_NATS_PASSWORD", &c.NATS.Password},
		{"IDEM_NATS_TOKEN", &c.NATS.Token},
		{"IDEM_DATABASE_URL", &c.Postgres.URL},
		{"IDEM_HTTP_ADDR", &c.HTTP.Addr},
		{"IDEM_HTTP_TOKEN", &c.HTTP.Token},
	}
}

// applyEnv overrides fields from the environment; an empty variable is unset.
func (c *Config) applyEnv(getenv func(string) string) {
	if getenv == nil {
		return
	}
	for _, o := range c.envOverrides() {
		if v := getenv(o.name); v != "" {
			*o.field = v
		}
	}
	if v := getenv("IDEM_NATS_MAX_GROUP"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			n = -1 // refused by Validate, naming the field
		}
		c.NATS.MaxGroup = n
	}
}
