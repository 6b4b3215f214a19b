package files

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// openNDJSON decodes the first object, checks its keys, and re-encodes
// every object as a row of COPY's text format, in the target's column
// order.
func openNDJSON(f *File, body io.ReadCloser, t Target) (*Stream, error) {
	r := &ndjsonRows{
		f:   f,
		t:   t,
		idx: t.index(),
		dec: json.NewDecoder(bufio.NewReaderSize(body, readBuffer)),
		obj: map[string]json.RawMessage{},
	}
	ok, err := r.next()
	if err != nil {
		return nil, err
	}
	if !ok {
		return &Stream{empty: true, close: body.Close}, nil
	}
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = c.Name
	}
	r.fill = make([][]byte, len(t.Columns))
	for i, c := range t.Columns {
		if v, ok := t.Fill[c.Name]; ok {
			r.fill[i] = appendText(nil, []byte(v))
		}
	}
	r.pending = true
	return &Stream{sql: copySQL(t, cols, "text"), r: &rowReader{enc: r}, close: body.Close}, nil
}

// ndjsonRows decodes objects one at a time.
type ndjsonRows struct {
	f       *File
	t       Target
	idx     map[string]int
	dec     *json.Decoder
	obj     map[string]json.RawMessage
	fill    [][]byte // text-encoded fill value per target column, nil if none
	n       int64    // objects decoded
	pending bool     // obj holds the first object, not encoded yet
}

// next decodes the next object into r.obj and checks its keys.
func (r *ndjsonRows) next() (bool, error) {
	clear(r.obj)
	off := r.dec.InputOffset()
	err := r.dec.Decode(&r.obj)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return false, &FormatError{URL: r.f.URL, Err: fmt.Errorf("object %d (byte %d): not a JSON object", r.n+1, off)}
		}
		// The decoder says io.ErrUnexpectedEOF itself, unwrapped, when the
		// file ends inside an object. A read of the store that failed (a body
		// cut mid-file, which wraps io.ErrUnexpectedEOF too) comes back as
		// the store's own error, transient: the file is not at fault.
		var se *json.SyntaxError
		if errors.As(err, &se) || err == io.ErrUnexpectedEOF {
			return false, &FormatError{URL: r.f.URL, Err: fmt.Errorf("object %d (byte %d): %v", r.n+1, off, err)}
		}
		return false, err
	}
	r.n++
	var unknown []string
	for k := range r.obj {
		if _, ok := r.idx[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		problems := make([]string, len(unknown))
		for i, k := range unknown {
			problems[i] = fmt.Sprintf("object %d: unknown key %q: the target has no such column", r.n, k)
			if c := r.t.closest(k); c != "" {
				problems[i] += fmt.Sprintf(" (names match exactly; the target has %q)", c)
			}
		}
		return false, &SchemaError{URL: r.f.URL, Problems: problems}
	}
	return true, nil
}

// encode appends the next row to dst; false at the end of the file.
func (r *ndjsonRows) encode(dst []byte) ([]byte, bool, error) {
	if r.pending {
		r.pending = false
	} else {
		ok, err := r.next()
		if err != nil || !ok {
			return dst, false, err
		}
	}
	for i, c := range r.t.Columns {
		if i > 0 {
			dst = append(dst, '\t')
		}
		v, ok := r.obj[c.Name]
		switch {
		case !ok && r.fill[i] != nil:
			dst = append(dst, r.fill[i]...)
		case !ok:
			dst = append(dst, `\N`...)
		default:
			var err error
			if dst, err = appendJSON(dst, v); err != nil {
				return dst, false, &FormatError{URL: r.f.URL, Err: fmt.Errorf("object %d, key %q: %v", r.n, c.Name, err)}
			}
		}
	}
	return append(dst, '\n'), true, nil
}

// appendJSON writes one JSON value as a COPY text field: null is NULL, a
// string its text, a number or a boolean its literal (which PostgreSQL's
// numeric, integer, float and boolean inputs read), an object or an array
// its JSON (for json and jsonb columns).
func appendJSON(dst []byte, v json.RawMessage) ([]byte, error) {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0:
		return dst, errors.New("empty value")
	case string(v) == "null":
		return append(dst, `\N`...), nil
	case v[0] == '"':
		if bytes.IndexByte(v, '\\') < 0 {
			return appendText(dst, v[1:len(v)-1]), nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return dst, err
		}
		return appendText(dst, []byte(s)), nil
	default:
		return appendText(dst, v), nil
	}
}
