package files

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
)

const (
	// readBuffer is the buffer each CSV or NDJSON file is read through.
	readBuffer = 256 << 10
	// headerMax bounds a CSV header line.
	headerMax = 1 << 20
)

// openCSV reads and checks the header, and streams the rest to COPY as is,
// with the fill columns appended to each record when there are any.
func openCSV(f *File, body io.ReadCloser, t Target) (*Stream, error) {
	br := bufio.NewReaderSize(body, readBuffer)
	if _, err := br.Peek(1); errors.Is(err, io.EOF) {
		return &Stream{empty: true, close: body.Close}, nil
	} else if err != nil {
		return nil, err
	}
	header, err := readHeader(f, br)
	if err != nil {
		return nil, err
	}
	cols, fill, problems := matchNames(header, t, "header")
	if len(problems) > 0 {
		return nil, &SchemaError{URL: f.URL, Problems: problems}
	}
	s := &Stream{close: body.Close}
	s.sql = copySQL(t, append(cols, fill...), "csv")
	if len(fill) == 0 {
		s.r = br
		return s, nil
	}
	var suffix []byte
	for _, c := range fill {
		suffix = append(suffix, ',', '"')
		suffix = append(suffix, strings.ReplaceAll(t.Fill[c], `"`, `""`)...)
		suffix = append(suffix, '"')
	}
	s.r = &csvFill{f: f, src: br, suffix: suffix}
	return s, nil
}

// readHeader reads a CSV's header record from br (a byte order mark
// skipped) and splits it into names.
func readHeader(f *File, br *bufio.Reader) ([]string, error) {
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
		_, _ = br.Discard(3)
	}
	line, err := readRecord(br)
	if err != nil {
		if errors.Is(err, errNoRecordEnd) {
			return nil, &FormatError{URL: f.URL, Err: errors.New("the header line is longer than 1 MiB or has an unterminated quote")}
		}
		return nil, err
	}
	header, err := csv.NewReader(bytes.NewReader(line)).Read()
	if err != nil {
		return nil, &FormatError{URL: f.URL, Err: fmt.Errorf("header: %w", err)}
	}
	return header, nil
}

var errNoRecordEnd = errors.New("no record end")

// readRecord reads the header record: up to a newline outside quotes,
// without the line ending. A CSV with only a header and no newline is a
// header too.
func readRecord(br *bufio.Reader) ([]byte, error) {
	var rec []byte
	for {
		chunk, err := br.ReadSlice('\n')
		rec = append(rec, chunk...)
		if len(rec) > headerMax {
			return nil, errNoRecordEnd
		}
		switch {
		case err == nil && bytes.Count(rec, []byte{'"'})%2 == 0:
			rec = bytes.TrimSuffix(bytes.TrimSuffix(rec, []byte("\n")), []byte("\r"))
			return rec, nil
		case err == nil || errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if bytes.Count(rec, []byte{'"'})%2 != 0 {
				return nil, errNoRecordEnd
			}
			return bytes.TrimSuffix(rec, []byte("\r")), nil
		default:
			return nil, err
		}
	}
}

// matchNames matches a file's column names (a CSV header) against t: the
// target columns they name, in the file's order; the target columns that
// Fill gives and the file lacks; and every difference.
func matchNames(names []string, t Target, what string) (cols, fill, problems []string) {
	idx := t.index()
	seen := map[string]bool{}
	for i, n := range names {
		switch _, ok := idx[n]; {
		case n == "":
			problems = append(problems, fmt.Sprintf("%s column %d has no name", what, i+1))
		case seen[n]:
			problems = append(problems, fmt.Sprintf("column %q appears twice in the %s", n, what))
		case !ok:
			p := fmt.Sprintf("unknown column %q: the target has no such column", n)
			if c := t.closest(n); c != "" {
				p += fmt.Sprintf(" (names match exactly; the target has %q)", c)
			}
			problems = append(problems, p)
		default:
			cols = append(cols, n)
		}
		seen[n] = true
	}
	for _, c := range t.Columns {
		if seen[c.Name] {
			continue
		}
		if _, ok := t.Fill[c.Name]; ok {
			fill = append(fill, c.Name)
			continue
		}
		problems = append(problems, fmt.Sprintf("missing column %q: the %s lacks it and nothing fills it", c.Name, what))
	}
	return cols, fill, problems
}

// csvFill appends the fill columns to every record of a CSV stream. A
// record ends at a newline outside quotes, which is also how PostgreSQL's
// COPY splits CSV: each quote character toggles quoting, a doubled quote
// toggling twice. A blank line is passed through as is, so COPY judges it
// as it would without the fill.
type csvFill struct {
	f       *File
	src     *bufio.Reader
	suffix  []byte
	out     []byte
	off     int
	inQuote bool
	partial bool // bytes of the current record are out, its end is not
	heldCR  bool // a record's last byte was a CR at a buffer's end
	crlf    bool // the last record ended with CRLF: the file's line ending
	err     error
}

func (c *csvFill) Read(p []byte) (int, error) {
	for c.off == len(c.out) {
		if c.err != nil {
			return 0, c.err
		}
		c.out, c.off = c.out[:0], 0
		c.fill()
	}
	n := copy(p, c.out[c.off:])
	c.off += n
	return n, nil
}

// fill converts source lines into c.out until it holds 64 KiB or the
// source ends.
func (c *csvFill) fill() {
	for len(c.out) < 64<<10 {
		line, err := c.src.ReadSlice('\n')
		if len(line) > 0 {
			c.line(line)
		}
		switch {
		case err == nil || errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			c.end()
			return
		default:
			c.err = err
			return
		}
	}
}

// line takes one ReadSlice result: a line with its "\n", or a part of a
// line longer than the buffer, or the file's last bytes.
func (c *csvFill) line(b []byte) {
	if c.heldCR {
		c.heldCR = false
		if b[0] != '\n' || c.inQuote {
			c.out = append(c.out, '\r')
		} else {
			c.finish(true)
			c.out = append(c.out, '\n')
			return
		}
	}
	body, nl := b, false
	if body[len(body)-1] == '\n' {
		body, nl = body[:len(body)-1], true
	}
	if n := bytes.Count(body, []byte{'"'}); n%2 == 1 {
		c.inQuote = !c.inQuote
	}
	if !nl || c.inQuote {
		if !nl && !c.inQuote && len(body) > 0 && body[len(body)-1] == '\r' {
			body, c.heldCR = body[:len(body)-1], true
		}
		c.out = append(c.out, body...)
		if nl {
			c.out = append(c.out, '\n')
		}
		c.partial = c.partial || len(body) > 0 || nl || c.heldCR
		return
	}
	cr := len(body) > 0 && body[len(body)-1] == '\r'
	if cr {
		body = body[:len(body)-1]
	}
	c.out = append(c.out, body...)
	if len(body) > 0 {
		c.partial = true
	}
	c.finish(cr)
	c.out = append(c.out, '\n')
}

// finish ends a record: the fill columns, then the CR of a CRLF ending.
func (c *csvFill) finish(cr bool) {
	c.crlf = cr
	if c.partial {
		c.out = append(c.out, c.suffix...)
	}
	if cr {
		c.out = append(c.out, '\r')
	}
	c.partial = false
}

// end closes the last record when the file does not end with a newline.
func (c *csvFill) end() {
	if c.inQuote {
		c.err = &FormatError{URL: c.f.URL, Err: errors.New("the last record has an unterminated quote")}
		return
	}
	if c.heldCR {
		c.heldCR = false
		c.finish(true)
		c.out = append(c.out, '\n')
	} else if c.partial {
		// The same line ending as the records before: COPY refuses a mix.
		c.finish(c.crlf)
		c.out = append(c.out, '\n')
	}
	c.err = io.EOF
}
