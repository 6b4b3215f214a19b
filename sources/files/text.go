package files

import "io"

// rowEncoder appends the next row, in COPY's text format with its "\n", to
// dst; false once there is no row left.
type rowEncoder interface {
	encode(dst []byte) ([]byte, bool, error)
}

// rowReader turns a rowEncoder into COPY data: it encodes rows into a
// buffer of about 64 KiB and hands it out, so memory is one batch of rows
// whatever the file's size.
type rowReader struct {
	enc  rowEncoder
	buf  []byte
	off  int
	done bool
	err  error
}

const batchBytes = 64 << 10

func (r *rowReader) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.err != nil {
			return 0, r.err
		}
		if r.done {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for len(r.buf) < batchBytes {
			var more bool
			r.buf, more, r.err = r.enc.encode(r.buf)
			if r.err != nil || !more {
				r.done = true
				break
			}
		}
		if r.err == nil && r.done {
			if c, ok := r.enc.(interface{ finish() error }); ok {
				r.err = c.finish()
			}
		}
		if r.err != nil {
			// Rows encoded before the error are dropped with it: COPY fails.
			r.buf = r.buf[:0]
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// appendText appends b as a field of COPY's text format: a backslash,
// newline, carriage return or tab is escaped, every other byte passes.
func appendText(dst, b []byte) []byte {
	start := 0
	for i, c := range b {
		var esc byte
		switch c {
		case '\\':
			esc = '\\'
		case '\n':
			esc = 'n'
		case '\r':
			esc = 'r'
		case '\t':
			esc = 't'
		default:
			continue
		}
		dst = append(dst, b[start:i]...)
		dst = append(dst, '\\', esc)
		start = i + 1
	}
	return append(dst, b[start:]...)
}
