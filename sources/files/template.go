package files

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/idem-data/idem/schemas"
)

// location is a parsed Spec.URL: which store, and the template of a
// partition's prefix inside it.
type location struct {
	scheme string // "s3" or "file"
	bucket string // s3 only
	root   string // file only: the absolute directory the store is rooted at
	// tmpl is the prefix template relative to the store: after the bucket
	// for s3, after root for file. It ends in "/" (or is "" for a root
	// that is the prefix itself, which Validate refuses).
	tmpl []piece
}

// piece is a literal run of the template or a placeholder.
type piece struct {
	lit    string
	layout string // strftime layout of {partition:...}; "" for {partition}
	ph     bool   // a placeholder
}

// parseURL reads a Spec.URL. It parses by hand: url.Parse would take the
// % of a strftime layout for an escape.
func parseURL(raw string) (location, error) {
	var loc location
	switch {
	case raw == "":
		return loc, errors.New("missing; want s3://BUCKET/path/{partition}/ or file:///abs/path/{partition}/")
	case strings.HasPrefix(raw, "s3://"):
		loc.scheme = "s3"
		bucket, rest, ok := strings.Cut(strings.TrimPrefix(raw, "s3://"), "/")
		if !ok || bucket == "" {
			return loc, fmt.Errorf("%q: want s3://BUCKET/path/{partition}/", raw)
		}
		if strings.ContainsAny(bucket, "{}%?#@:") {
			return loc, fmt.Errorf("%q: the bucket %q must be a plain bucket name (no placeholder, port or credentials)", raw, bucket)
		}
		loc.bucket = bucket
		tmpl, err := parseTemplate(rest)
		if err != nil {
			return loc, fmt.Errorf("%q: %w", raw, err)
		}
		loc.tmpl = tmpl
	case strings.HasPrefix(raw, "file://"):
		loc.scheme = "file"
		p := strings.TrimPrefix(raw, "file://")
		if !strings.HasPrefix(p, "/") {
			return loc, fmt.Errorf("%q: want an absolute path, file:///abs/path/{partition}/", raw)
		}
		// The store is rooted at the directory above the first placeholder,
		// so a partition's prefix can never name a file outside it.
		static, _, _ := strings.Cut(p, "{")
		root := static[:strings.LastIndex(static, "/")+1]
		if path.Clean(root) != strings.TrimSuffix(root, "/") && root != "/" {
			return loc, fmt.Errorf("%q: the path must be clean (no ., .. or //)", raw)
		}
		loc.root = path.Clean(root)
		tmpl, err := parseTemplate(p[len(root):])
		if err != nil {
			return loc, fmt.Errorf("%q: %w", raw, err)
		}
		loc.tmpl = tmpl
	default:
		return loc, fmt.Errorf("%q: the scheme must be s3:// or file://", raw)
	}
	if !strings.HasSuffix(raw, "/") {
		return loc, fmt.Errorf("%q: must end with / (it names a partition's prefix, not a file)", raw)
	}
	if !slicesContainsPlaceholder(loc.tmpl) {
		return loc, fmt.Errorf("%q: has no {partition} placeholder, so every partition would read the same files", raw)
	}
	return loc, nil
}

func slicesContainsPlaceholder(ps []piece) bool {
	for _, p := range ps {
		if p.ph {
			return true
		}
	}
	return false
}

// parseTemplate splits a path template into literals and placeholders.
func parseTemplate(s string) ([]piece, error) {
	if strings.HasPrefix(s, "/") || strings.Contains(s, "//") {
		return nil, errors.New("the path must not hold an empty segment (//)")
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == "." || seg == ".." {
			return nil, errors.New("the path must not hold . or .. segments")
		}
	}
	var out []piece
	for s != "" {
		i := strings.IndexAny(s, "{}")
		if i < 0 {
			out = append(out, piece{lit: s})
			break
		}
		if s[i] == '}' {
			return nil, errors.New("a } without its {")
		}
		if i > 0 {
			out = append(out, piece{lit: s[:i]})
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, errors.New("a { without its }")
		}
		inner := s[i+1 : i+end]
		s = s[i+end+1:]
		name, layout, hasLayout := strings.Cut(inner, ":")
		if name != "partition" {
			return nil, fmt.Errorf("unknown placeholder {%s}; want {partition} or {partition:%%Y/%%m/%%d}", inner)
		}
		if hasLayout {
			if err := checkLayout(layout); err != nil {
				return nil, fmt.Errorf("{%s}: %w", inner, err)
			}
			if layout == "" {
				return nil, fmt.Errorf("{%s}: empty layout; write {partition} for the partition key as is", inner)
			}
		}
		out = append(out, piece{ph: true, layout: layout})
	}
	return out, nil
}

// The strftime directives a layout may use: the ones a date or hour
// partition can fill.
const layoutDirectives = "Y m d H M S j %"

func checkLayout(layout string) error {
	for i := 0; i < len(layout); i++ {
		if layout[i] != '%' {
			continue
		}
		if i+1 == len(layout) || !strings.ContainsRune(layoutDirectives, rune(layout[i+1])) || layout[i+1] == ' ' {
			return fmt.Errorf("unknown directive in %q; use %%Y %%m %%d %%H %%M %%S %%j or %%%%", layout)
		}
		i++
	}
	return nil
}

// strftime formats t with the directives checkLayout accepts.
func strftime(layout string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(layout); i++ {
		c := layout[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		switch layout[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		}
	}
	return b.String()
}

// Resolve returns the prefix of partition p's files, relative to the store
// NewStore builds for spec: the key prefix inside the bucket for s3://, the
// path below the template's fixed directory for file://. It always ends in
// "/". A text partition can only fill {partition}, and never with a "/",
// "\", "." or ".." segment or a control character: the key names one
// prefix, never a path elsewhere.
func Resolve(spec Spec, p schemas.Partition) (string, error) {
	loc, err := parseURL(spec.URL)
	if err != nil {
		return "", fmt.Errorf("url: %w", err)
	}
	var b strings.Builder
	for _, pc := range loc.tmpl {
		switch {
		case !pc.ph:
			b.WriteString(pc.lit)
		case pc.layout == "":
			if err := checkKey(p.Key); err != nil {
				return "", err
			}
			b.WriteString(p.Key)
		default:
			if p.Type != schemas.PartitionDate && p.Type != schemas.PartitionHour || p.Time.IsZero() {
				return "", fmt.Errorf("partition %s: {partition:%s} needs a date or timestamp partition, not %s", strconv.Quote(p.Key), pc.layout, orText(p.Type))
			}
			b.WriteString(strftime(pc.layout, p.Time.UTC()))
		}
	}
	return b.String(), nil
}

func orText(t schemas.PartitionType) string {
	if t == "" {
		return "an untyped key"
	}
	return string(t)
}

// checkKey refuses a partition key that would leave its prefix.
func checkKey(key string) error {
	if key == "" || key == "." || key == ".." || strings.ContainsAny(key, `/\`) {
		return fmt.Errorf("partition %s: cannot name a prefix (it is empty, . or .., or holds / or \\)", strconv.Quote(key))
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("partition %s: holds a control character", strconv.Quote(key))
		}
	}
	return nil
}

// NewStore builds the store spec.URL names: an S3 store over its bucket,
// reached as opts say, or a local store rooted at the directory above the
// template's first placeholder (opts unused). Keys from Resolve are
// relative to it.
func NewStore(spec Spec, opts S3Options) (Store, error) {
	loc, err := parseURL(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	if loc.scheme == "s3" {
		return NewS3(loc.bucket, opts)
	}
	return NewLocal(loc.root)
}
