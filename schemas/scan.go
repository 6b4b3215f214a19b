package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// fields are the wire body's fields, in the order the schema lists them.
var fields = [...]string{"dataset", "partition", "run_id", "force", "attributes"}

// walk reads a body token by token. encoding/json's Unmarshal cannot be used:
// it matches field names case-insensitively and lets a duplicate key silently
// win, and an event must mean the same thing to every reader. (Like every Go
// JSON reader, the tokenizer turns a lone surrogate escape such as "\ud800"
// into U+FFFD; that rune is printable and round-trips, so it is accepted.)
type walk struct {
	dec   *json.Decoder
	event PartitionReady
	seen  map[string]bool
	// first is the first field-level problem. Scanning goes on after it so a
	// truncated or malformed body is reported as such, whatever it contains.
	first *InvalidEventError
}

func (w *walk) fail(field, reason string) {
	if w.first == nil {
		w.first = invalid(field, reason)
	}
}

// scanBody checks the JSON structure and field types and collects the values.
// Content rules (patterns, lengths) are Decode's, after this.
func scanBody(body []byte) (*walk, error) {
	w := &walk{dec: json.NewDecoder(bytes.NewReader(body)), seen: make(map[string]bool, len(fields))}
	// Numbers are never valid here; UseNumber keeps 1e999 a syntax-checked
	// string instead of a float conversion error.
	w.dec.UseNumber()

	tok, err := w.next()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, invalid("body", "must be a JSON object, got "+kind(tok))
	}
	for w.dec.More() {
		tok, err := w.next()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string) // json.Decoder only yields string keys in an object
		if err := w.field(name); err != nil {
			return nil, err
		}
	}
	if _, err := w.next(); err != nil { // the closing brace
		return nil, err
	}
	end := w.dec.InputOffset()
	if rest := bytes.TrimLeft(body[end:], jsonSpace); len(rest) > 0 {
		return nil, invalid("body", fmt.Sprintf("has data after the JSON object at byte %d; send exactly one object per message", int64(len(body)-len(rest))))
	}
	if w.first != nil {
		return nil, w.first
	}
	return w, nil
}

func (w *walk) next() (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, syntaxError(err, w.dec.InputOffset())
	}
	return tok, nil
}

// field reads the value of top-level field name.
func (w *walk) field(name string) error {
	known := false
	for _, f := range fields {
		known = known || f == name
	}
	switch {
	case name == "":
		w.fail("body", "has a field with an empty name; the fields are dataset, partition, run_id, force and attributes")
	case !known:
		w.fail(truncate(name), unknownReason(name))
	case w.seen[name]:
		w.fail(name, "appears twice; parsers disagree on which copy wins, so send it once")
	}
	w.seen[name] = true

	tok, err := w.next()
	if err != nil || !known {
		return w.skipErr(tok, err)
	}
	switch name {
	case "dataset", "partition", "run_id":
		s, ok := tok.(string)
		if !ok {
			w.fail(name, "must be a string, got "+kind(tok))
			return w.skip(tok)
		}
		switch name {
		case "dataset":
			w.event.Dataset = s
		case "partition":
			w.event.Partition = s
		default:
			w.event.RunID = s
		}
	case "force":
		b, ok := tok.(bool)
		if !ok {
			w.fail(name, "must be true or false, got "+kind(tok))
			return w.skip(tok)
		}
		w.event.Force = b
	case "attributes":
		if tok != json.Delim('{') {
			w.fail(name, "must be an object of string values, got "+kind(tok))
			return w.skip(tok)
		}
		return w.attributes()
	}
	return nil
}

// attributes reads the attributes object after its opening brace.
func (w *walk) attributes() error {
	attrs := make(map[string]string)
	n := 0
	for w.dec.More() {
		tok, err := w.next()
		if err != nil {
			return err
		}
		k, _ := tok.(string)
		if tok, err = w.next(); err != nil {
			return err
		}
		n++
		_, dup := attrs[k]
		v, isString := tok.(string)
		switch {
		case n > MaxAttributes:
			w.fail("attributes", fmt.Sprintf("has more than %d entries; keep attributes few and small, they are recorded, not used", MaxAttributes))
		case dup:
			w.fail("attributes", fmt.Sprintf("key %s appears twice; parsers disagree on which copy wins, so send it once", quote(k)))
		case !isString:
			w.fail("attributes."+truncate(k), "must be a string, got "+kind(tok))
		default:
			attrs[k] = v
		}
		if err := w.skip(tok); err != nil {
			return err
		}
	}
	if _, err := w.next(); err != nil { // the closing brace
		return err
	}
	if len(attrs) > 0 { // {} and absent mean the same; nil makes them equal
		w.event.Attributes = attrs
	}
	return nil
}

func (w *walk) skipErr(tok json.Token, err error) error {
	if err != nil {
		return err
	}
	return w.skip(tok)
}

// skip consumes the rest of a value whose first token was tok, so scanning
// can go on looking for syntax errors after a field-level one.
func (w *walk) skip(tok json.Token) error {
	depth := 0
	for {
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			default:
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
		var err error
		if tok, err = w.next(); err != nil {
			return err
		}
	}
}

func unknownReason(name string) string {
	for _, f := range fields {
		if strings.EqualFold(f, name) {
			return fmt.Sprintf("is not a field; names are case-sensitive, did you mean %q?", f)
		}
	}
	return "is not a field of partition_ready.v1; the fields are dataset, partition, run_id, force and attributes"
}

// kind names a JSON value by its first token, for "must be X, got Y".
func kind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "an array"
		}
		return "an object"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}
