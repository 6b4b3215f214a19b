package config

// How the generator of docs/CONFIGURATION.md turns doc comments into the
// page's words: Go names become what the user writes in idem.yaml.

import (
	"go/doc/comment"
	"reflect"
	"regexp"
	"strings"
)

var (
	identRef = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?`)
	seeFunc  = regexp.MustCompile(`\s*\(see ([A-Za-z_][A-Za-z0-9_.]*)\)`)
)

// text turns a field's comment into one markdown line, owner being the
// struct whose fields it names.
func (g *refGen) text(doc string, owner reflect.Type) string {
	return g.inline(strings.Join(strings.Fields(doc), " "), owner, true)
}

// inline rewrites the Go names of s into what the user writes: a field of
// owner as its YAML key, Type.Field as its YAML path, a constant as its
// value. It drops "(see Func)" pointers to Go functions and escapes
// markdown outside the code spans s already has.
func (g *refGen) inline(s string, owner reflect.Type, first bool) string {
	s = seeFunc.ReplaceAllStringFunc(s, func(m string) string {
		name := seeFunc.FindStringSubmatch(m)[1]
		if _, fn, ok := strings.Cut(name, "."); ok {
			name = fn
		}
		if g.src.funcs[name] {
			return ""
		}
		if path, ok := g.typePaths[name]; ok && path != "" {
			return " (see " + code(path) + ")"
		}
		return m
	})
	var out strings.Builder
	for i, part := range strings.Split(s, "`") {
		if i%2 == 1 {
			out.WriteString("`" + strings.ReplaceAll(part, "|", `\|`) + "`")
			continue
		}
		last := 0
		for _, loc := range identRef.FindAllStringIndex(part, -1) {
			if !wordBoundary(part, loc[0], loc[1]) {
				continue
			}
			word := part[loc[0]:loc[1]]
			rep, ok := g.resolve(word, owner, first && i == 0 && loc[0] == 0)
			if !ok {
				continue
			}
			out.WriteString(escape(part[last:loc[0]]))
			out.WriteString(rep)
			last = loc[1]
		}
		out.WriteString(escape(part[last:]))
	}
	return out.String()
}

// wordBoundary reports whether s[i:j] is a whole word: not part of a
// longer name, a dotted path or a hyphenated word.
func wordBoundary(s string, i, j int) bool {
	if i > 0 && (isWordByte(s[i-1]) || s[i-1] == '.' && i > 1 && isWordByte(s[i-2])) {
		return false
	}
	return j == len(s) || !isWordByte(s[j]) && !(s[j] == '.' && j+1 < len(s) && isWordByte(s[j+1]))
}

func isWordByte(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func (g *refGen) resolve(word string, owner reflect.Type, first bool) (string, bool) {
	if typ, field, ok := strings.Cut(word, "."); ok {
		if path, ok := g.typePaths[typ]; ok {
			if t := g.blockType(path); t != nil {
				if f, ok := t.FieldByName(field); ok && yamlKey(f) != "" {
					return code(join(path, yamlKey(f))), true
				}
			}
		}
		return "", false
	}
	if owner != nil {
		// Mid-sentence, only a CamelCase name that is not also its type's
		// (and a product's: OpenLineage, OTLP) is taken for the field.
		if f, ok := owner.FieldByName(word); ok && yamlKey(f) != "" && (first || mixedCase(word) && deref(f.Type).Name() != word) {
			return code(yamlKey(f)), true
		}
	}
	if v, ok := referenceIdents[word]; ok {
		return code(formatValue(reflect.ValueOf(v))), true
	}
	if path, ok := g.typePaths[word]; ok && first && path != "" {
		return code(path), true
	}
	return "", false
}

func (g *refGen) blockType(path string) reflect.Type {
	for _, b := range g.blocks {
		if b.Path == path {
			return b.Type
		}
	}
	return nil
}

func mixedCase(s string) bool {
	return strings.ToLower(s) != s && strings.ToUpper(s) != s
}

var mdEscaper = strings.NewReplacer(`\`, `\\`, "<", "&lt;", ">", "&gt;", "|", `\|`, "*", `\*`, "[", `\[`)

func escape(s string) string { return mdEscaper.Replace(s) }

// markdown renders a type's doc comment: paragraphs, lists and code blocks.
func (g *refGen) markdown(doc string, owner reflect.Type) string {
	var p comment.Parser
	var blocks []string
	first := true
	for _, blk := range p.Parse(doc).Content {
		switch b := blk.(type) {
		case *comment.Paragraph:
			blocks = append(blocks, g.inline(strings.Join(strings.Fields(plainText(b.Text)), " "), owner, first))
		case *comment.List:
			var items []string
			for _, it := range b.Items {
				var parts []string
				for _, c := range it.Content {
					if para, ok := c.(*comment.Paragraph); ok {
						parts = append(parts, plainText(para.Text))
					}
				}
				items = append(items, "- "+g.inline(strings.Join(strings.Fields(strings.Join(parts, " ")), " "), owner, false))
			}
			blocks = append(blocks, strings.Join(items, "\n"))
		case *comment.Code:
			blocks = append(blocks, "```yaml\n"+b.Text+"```")
		}
		first = false
	}
	return strings.Join(blocks, "\n\n")
}

func plainText(ts []comment.Text) string {
	var b strings.Builder
	for _, t := range ts {
		switch t := t.(type) {
		case comment.Plain:
			b.WriteString(string(t))
		case comment.Italic:
			b.WriteString(string(t))
		case *comment.Link:
			b.WriteString(plainText(t.Text))
		case *comment.DocLink:
			b.WriteString(plainText(t.Text))
		}
	}
	return b.String()
}
