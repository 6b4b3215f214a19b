package files

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"
)

// Reads of a Parquet file: one buffer of this size per column of the row
// group being read, so the total stays near parquetBufferBudget whatever
// the column count, within [min, max] per column.
const (
	parquetBufferBudget = 16 << 20
	parquetBufferMin    = 64 << 10
	parquetBufferMax    = 1 << 20
	parquetTail         = 64 << 10 // read once to find the footer
	parquetBatch        = 128      // rows decoded at a time
)

// openParquet reads the footer, checks its schema against t and returns a
// stream that decodes one row group after another.
func openParquet(f *File, ra ReaderAt, allow Allow, t Target) (*Stream, error) {
	tail, pf, err := parquetFooter(f, ra)
	if err != nil {
		return nil, err
	}
	leaves, names, bad := parquetLeaves(pf.Metadata().Schema)
	_, fill, problems := matchNames(names, t, "file")
	idx := t.index()
	for _, n := range names {
		// A column the target lacks is reported unknown; one it has, why
		// it cannot load.
		if why, ok := bad[n]; ok {
			if _, want := idx[n]; want {
				problems = append(problems, fmt.Sprintf("column %q: %s", n, why))
			}
		}
	}
	if len(bad) > 0 {
		return nil, &SchemaError{URL: f.URL, Problems: problems}
	}
	var loc *time.Location
	if allow.NaiveTimestampsIn != "" {
		if loc, err = time.LoadLocation(allow.NaiveTimestampsIn); err != nil {
			return nil, fmt.Errorf("allow.naive_timestamps_in: %w", err)
		}
	}
	p := &parquetRows{f: f, t: t, byTarget: make([]int, len(t.Columns)), fill: make([][]byte, len(t.Columns))}
	for i := range p.byTarget {
		p.byTarget[i] = -1
	}
	p.enc = make([]appendFunc, len(leaves))
	for i, l := range leaves {
		ti, ok := idx[l.name]
		if !ok {
			continue // reported by matchNames
		}
		enc, problem := l.encoder(familyOf(t.Columns[ti].Type), t.Columns[ti].Type, allow, loc)
		if problem != "" {
			problems = append(problems, fmt.Sprintf("column %q: %s", l.name, problem))
			continue
		}
		p.enc[i], p.byTarget[ti] = enc, i
	}
	if len(problems) > 0 {
		return nil, &SchemaError{URL: f.URL, Problems: problems}
	}
	for _, c := range fill {
		p.fill[idx[c]] = appendText(nil, []byte(t.Fill[c]))
	}

	// Open again with read buffers sized for this file's column count; the
	// footer comes from the tail already read.
	size := min(max(parquetBufferBudget/max(len(leaves), 1), parquetBufferMin), parquetBufferMax)
	if pf, err = parquet.OpenFile(tail, f.Size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true),
		parquet.ReadBufferSize(size)); err != nil {
		return nil, parquetErr(f, err)
	}
	p.groups = pf.RowGroups()
	p.values = make([]parquet.Value, len(leaves))
	p.ra = ra
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = c.Name
	}
	s := &Stream{sql: copySQL(t, cols, "text"), r: &rowReader{enc: p}, close: p.close}
	if pf.NumRows() == 0 {
		s.empty = true
	}
	return s, nil
}

// parquetFooter reads f's footer through a cache of its tail, which a
// second parquet.OpenFile reads again for free.
func parquetFooter(f *File, ra ReaderAt) (*tailCache, *parquet.File, error) {
	tail, err := newTailCache(f, ra)
	if err != nil {
		return nil, nil, err
	}
	pf, err := parquet.OpenFile(tail, f.Size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, nil, parquetErr(f, err)
	}
	return tail, pf, nil
}

// parquetErr is a file parquet-go cannot read: a *ChangedError from the
// store as itself, anything else a *FormatError.
func parquetErr(f *File, err error) error {
	var ce *ChangedError
	if errors.As(err, &ce) {
		return ce
	}
	var se *s3Error
	if errors.As(err, &se) {
		return se
	}
	return &FormatError{URL: f.URL, Err: err}
}

// parquetRows decodes row groups one after another, a batch of rows at a
// time.
type parquetRows struct {
	f        *File
	t        Target
	ra       ReaderAt
	groups   []parquet.RowGroup
	rows     parquet.Rows
	batch    []parquet.Row
	n, i     int
	values   []parquet.Value // the current row, by leaf
	enc      []appendFunc    // by leaf
	byTarget []int           // leaf of each target column, -1 if filled
	fill     [][]byte        // text of each filled target column
	closed   bool
}

func (p *parquetRows) encode(dst []byte) ([]byte, bool, error) {
	for p.i == p.n {
		if err := p.nextBatch(); err != nil {
			if errors.Is(err, io.EOF) {
				return dst, false, nil
			}
			return dst, false, parquetErr(p.f, err)
		}
	}
	row := p.batch[p.i]
	p.i++
	clear(p.values)
	for _, v := range row {
		if c := v.Column(); c >= 0 && c < len(p.values) {
			p.values[c] = v
		}
	}
	for ti, li := range p.byTarget {
		if ti > 0 {
			dst = append(dst, '\t')
		}
		if li < 0 {
			dst = append(dst, p.fill[ti]...)
			continue
		}
		v := p.values[li]
		if v.IsNull() {
			dst = append(dst, `\N`...)
			continue
		}
		dst = p.enc[li](dst, v)
	}
	return append(dst, '\n'), true, nil
}

// nextBatch reads the next rows, moving on to the next row group at the
// end of one; io.EOF after the last.
func (p *parquetRows) nextBatch() error {
	for {
		if p.rows == nil {
			if len(p.groups) == 0 {
				return io.EOF
			}
			p.rows = p.groups[0].Rows()
			p.groups = p.groups[1:]
			if p.batch == nil {
				p.batch = make([]parquet.Row, parquetBatch)
			}
		}
		n, err := p.rows.ReadRows(p.batch)
		p.i, p.n = 0, n
		if errors.Is(err, io.EOF) {
			p.rows.Close()
			p.rows = nil
			err = nil
		}
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
}

// finish runs when the last row is encoded: the store's last change check.
func (p *parquetRows) finish() error { return p.close() }

func (p *parquetRows) close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	if p.rows != nil {
		p.rows.Close()
	}
	return p.ra.Close()
}

// tailCache serves the footer reads of parquet.OpenFile from one read of
// the file's end, and passes every other read through.
type tailCache struct {
	ra   io.ReaderAt
	off  int64
	tail []byte
}

// newTailCache reads the last bytes of f. Only a read of all of them fills
// the cache: fewer, with io.EOF or no error, is a file shorter than its
// listing said, never a tail of zeros to parse.
func newTailCache(f *File, ra io.ReaderAt) (*tailCache, error) {
	n := min(f.Size, parquetTail)
	c := &tailCache{ra: ra, off: f.Size - n, tail: make([]byte, n)}
	got, err := ra.ReadAt(c.tail, c.off)
	switch {
	case got == len(c.tail):
		return c, nil
	case err == nil || err == io.EOF:
		return nil, &ChangedError{URL: f.URL, Listed: fmt.Sprintf("%d bytes", f.Size), Found: fmt.Sprintf("%d bytes", c.off+int64(got))}
	}
	return nil, err
}

func (c *tailCache) ReadAt(p []byte, off int64) (int, error) {
	if off >= c.off && off+int64(len(p)) <= c.off+int64(len(c.tail)) {
		return copy(p, c.tail[off-c.off:]), nil
	}
	return c.ra.ReadAt(p, off)
}

// leaf is one column of a flat Parquet schema, classified.
type leaf struct {
	name  string
	kind  leafKind
	bits  int           // kInt, kUint
	scale int           // kDecimal
	unit  time.Duration // kTime, kTimestamp: one tick
	utc   bool          // kTimestamp: isAdjustedToUTC
	phys  format.Type
	desc  string // for messages, e.g. "INT64 TIMESTAMP(isAdjustedToUTC=false,unit=MICROS)"
}

type leafKind int

const (
	kUnknown leafKind = iota
	kNull
	kBool
	kInt
	kUint
	kDecimal
	kFloat
	kString
	kJSON
	kBytes
	kUUID
	kDate
	kTime
	kTimestamp
	kInt96
)

// parquetLeaves classifies the columns of a footer schema: the leaves it
// can read, every top-level name in the file's order, and why each column
// it cannot read is refused (nested, repeated, an unknown type).
func parquetLeaves(schema []format.SchemaElement) (leaves []leaf, names []string, bad map[string]string) {
	bad = map[string]string{}
	for i := 1; i < len(schema); i++ {
		e := schema[i]
		names = append(names, e.Name)
		if e.NumChildren.Valid && e.NumChildren.V > 0 || !e.Type.Valid {
			bad[e.Name] = "nested (group) columns are not supported; flatten it"
			i += countDescendants(schema, i)
			continue
		}
		if e.RepetitionType.Valid && e.RepetitionType.V == format.Repeated {
			bad[e.Name] = "repeated columns are not supported"
			continue
		}
		l, problem := classify(e)
		if problem != "" {
			bad[e.Name] = problem
			continue
		}
		leaves = append(leaves, l)
	}
	return leaves, names, bad
}

// countDescendants is how many elements below schema[i] its subtree holds.
func countDescendants(schema []format.SchemaElement, i int) int {
	n, todo := 0, int(schema[i].NumChildren.V)
	for j := i + 1; todo > 0 && j < len(schema); j++ {
		n++
		todo--
		if schema[j].NumChildren.Valid {
			todo += int(schema[j].NumChildren.V)
		}
	}
	return n
}

func classify(e format.SchemaElement) (leaf, string) {
	l := leaf{name: e.Name, phys: e.Type.V}
	l.desc = e.Type.V.String()
	lt := e.LogicalType.Value
	if lt != nil {
		l.desc += " " + lt.String()
	} else if e.ConvertedType.Valid {
		l.desc += " " + convertedName(e.ConvertedType.V)
	}
	switch t := lt.(type) {
	case *format.StringType, *format.EnumType:
		l.kind = kString
	case *format.JsonType:
		l.kind = kJSON
	case *format.BsonType:
		l.kind = kBytes
	case *format.UUIDType:
		l.kind = kUUID
	case *format.DecimalType:
		l.kind, l.scale = kDecimal, int(t.Scale)
	case *format.DateType:
		l.kind = kDate
	case *format.TimeType:
		l.kind, l.unit = kTime, tick(t.Unit)
	case *format.TimestampType:
		l.kind, l.unit, l.utc = kTimestamp, tick(t.Unit), t.IsAdjustedToUTC
	case *format.IntType:
		l.kind, l.bits = kInt, int(t.BitWidth)
		if !t.IsSigned {
			l.kind = kUint
		}
	case *format.NullType:
		l.kind = kNull
	case nil:
		if e.ConvertedType.Valid {
			l = classifyConverted(e, l)
		} else {
			l = classifyPhysical(e, l)
		}
	}
	switch {
	case l.kind == kUnknown:
		return l, fmt.Sprintf("%s is not supported", l.desc)
	case (l.kind == kTime || l.kind == kTimestamp) && l.unit == 0:
		return l, fmt.Sprintf("%s: unknown time unit", l.desc)
	}
	return l, ""
}

// classifyConverted reads the legacy annotation of files written before
// logical types.
func classifyConverted(e format.SchemaElement, l leaf) leaf {
	if !e.ConvertedType.Valid {
		return l
	}
	switch e.ConvertedType.V {
	case deprecated.UTF8, deprecated.Enum:
		l.kind = kString
	case deprecated.Json:
		l.kind = kJSON
	case deprecated.Bson:
		l.kind = kBytes
	case deprecated.Decimal:
		l.kind, l.scale = kDecimal, int(e.Scale.V)
	case deprecated.Date:
		l.kind = kDate
	case deprecated.TimeMillis:
		l.kind, l.unit = kTime, time.Millisecond
	case deprecated.TimeMicros:
		l.kind, l.unit = kTime, time.Microsecond
	case deprecated.TimestampMillis:
		l.kind, l.unit, l.utc = kTimestamp, time.Millisecond, true
	case deprecated.TimestampMicros:
		l.kind, l.unit, l.utc = kTimestamp, time.Microsecond, true
	case deprecated.Int8, deprecated.Int16, deprecated.Int32, deprecated.Int64:
		l.kind, l.bits = kInt, map[deprecated.ConvertedType]int{deprecated.Int8: 8, deprecated.Int16: 16, deprecated.Int32: 32, deprecated.Int64: 64}[e.ConvertedType.V]
	case deprecated.Uint8, deprecated.Uint16, deprecated.Uint32, deprecated.Uint64:
		l.kind, l.bits = kUint, map[deprecated.ConvertedType]int{deprecated.Uint8: 8, deprecated.Uint16: 16, deprecated.Uint32: 32, deprecated.Uint64: 64}[e.ConvertedType.V]
	}
	return l
}

// classifyPhysical reads a column with no annotation by its physical type.
func classifyPhysical(e format.SchemaElement, l leaf) leaf {
	switch e.Type.V {
	case format.Boolean:
		l.kind = kBool
	case format.Int32:
		l.kind, l.bits = kInt, 32
	case format.Int64:
		l.kind, l.bits = kInt, 64
	case format.Int96:
		l.kind = kInt96
	case format.Float, format.Double:
		l.kind = kFloat
	case format.ByteArray, format.FixedLenByteArray:
		l.kind = kBytes
	}
	return l
}

func tick(u format.TimeUnit) time.Duration {
	switch u.Value.(type) {
	case *format.MilliSeconds:
		return time.Millisecond
	case *format.MicroSeconds:
		return time.Microsecond
	case *format.NanoSeconds:
		return time.Nanosecond
	}
	return 0
}

// appendFunc appends a non-null value as a COPY text field.
type appendFunc func(dst []byte, v parquet.Value) []byte

// Layouts of the timestamps written for PostgreSQL to read.
const (
	layoutTS   = "2006-01-02 15:04:05.999999999"
	layoutTSTZ = "2006-01-02 15:04:05.999999999-07:00"
)

// encoder says whether the leaf fits a column of family fam (its type
// name typ, for messages), and how to write its values; a problem, if
// not.
func (l leaf) encoder(fam family, typ string, allow Allow, loc *time.Location) (appendFunc, string) {
	refuse := func(why string) (appendFunc, string) {
		if why == "" {
			return nil, fmt.Sprintf("%s cannot load into %s", l.desc, typ)
		}
		return nil, fmt.Sprintf("%s cannot load into %s: %s", l.desc, typ, why)
	}
	lenient := fam == famText || fam == famOther // PostgreSQL reads the text
	switch l.kind {
	case kNull:
		return func(dst []byte, _ parquet.Value) []byte { return append(dst, `\N`...) }, ""
	case kBool:
		if fam != famBool && !lenient {
			return refuse("a boolean is not a " + typ)
		}
		return func(dst []byte, v parquet.Value) []byte {
			if v.Boolean() {
				return append(dst, 't')
			}
			return append(dst, 'f')
		}, ""
	case kInt, kUint, kDecimal, kFloat:
		numeric := fam.integer() || fam == famNumeric || fam == famFloat4 || fam == famFloat8
		switch {
		case !numeric && !lenient:
			return refuse("a number is not a " + typ)
		case l.kind == kUint && l.bits == 64 && fam.integer() && !allow.Uint64AsBigint:
			return refuse("PostgreSQL has no unsigned integer and values above 9223372036854775807 would not fit; make the column numeric, or set allow.uint64_as_bigint if such values never occur")
		case l.kind == kDecimal && l.scale > 0 && fam.integer():
			return refuse(fmt.Sprintf("a decimal with %d digits after the point would need rounding; make the column numeric", l.scale))
		case l.kind == kFloat && fam.integer():
			return refuse("a floating-point number would need rounding; make the column numeric or double precision")
		}
		return l.numberEncoder(), ""
	case kString:
		return func(dst []byte, v parquet.Value) []byte { return appendText(dst, v.ByteArray()) }, ""
	case kJSON:
		if fam != famJSON && !lenient {
			return refuse("JSON loads into json, jsonb or text")
		}
		return func(dst []byte, v parquet.Value) []byte { return appendText(dst, v.ByteArray()) }, ""
	case kBytes:
		if fam == famBytea {
			return func(dst []byte, v parquet.Value) []byte {
				dst = append(dst, `\\x`...)
				return hex.AppendEncode(dst, v.ByteArray())
			}, ""
		}
		// Writers that predate the STRING annotation leave text unannotated.
		return func(dst []byte, v parquet.Value) []byte { return appendText(dst, v.ByteArray()) }, ""
	case kUUID:
		if fam != famUUID && !lenient {
			return refuse("a UUID loads into uuid or text")
		}
		return appendUUID, ""
	case kDate:
		switch {
		case fam == famDate || fam == famTimestamp || lenient:
			return appendDate, ""
		case fam == famTimestamptz && loc != nil:
			return func(dst []byte, v parquet.Value) []byte {
				d := time.Unix(int64(v.Int32())*86400, 0).UTC()
				return time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, loc).AppendFormat(dst, layoutTSTZ)
			}, ""
		case fam == famTimestamptz:
			return refuse("a date has no time zone; set allow.naive_timestamps_in to the zone its midnight is in")
		}
		return refuse("")
	case kTime:
		if fam != famTime && !lenient {
			return refuse("a time of day loads into time or text")
		}
		unit := l.unit
		return func(dst []byte, v parquet.Value) []byte {
			n := int64(v.Int32())
			if l.phys == format.Int64 {
				n = v.Int64()
			}
			return time.Unix(0, 0).UTC().Add(time.Duration(n)*unit).AppendFormat(dst, "15:04:05.999999999")
		}, ""
	case kTimestamp, kInt96:
		naive := l.kind == kInt96 || !l.utc
		at := l.instant()
		switch {
		case fam == famTimestamptz && naive && loc == nil:
			return refuse("its timestamps are wall-clock times without isAdjustedToUTC, and PostgreSQL would read them in the session's time zone; set allow.naive_timestamps_in to the zone they are in, or make the column timestamp without time zone")
		case fam == famTimestamptz && naive:
			return func(dst []byte, v parquet.Value) []byte {
				w := at(v)
				return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc).AppendFormat(dst, layoutTSTZ)
			}, ""
		case fam == famTimestamptz || (lenient && !naive):
			return func(dst []byte, v parquet.Value) []byte { return at(v).AppendFormat(dst, layoutTSTZ) }, ""
		case fam == famTimestamp || lenient:
			// An instant into timestamp without time zone is its UTC wall time.
			return func(dst []byte, v parquet.Value) []byte { return at(v).AppendFormat(dst, layoutTS) }, ""
		}
		return refuse("a timestamp loads into timestamp, timestamptz or text")
	}
	return refuse("")
}

// instant reads a timestamp value as a UTC time (a naive one's wall time
// as if it were UTC).
func (l leaf) instant() func(parquet.Value) time.Time {
	if l.kind == kInt96 {
		return func(v parquet.Value) time.Time {
			i := v.Int96()
			nanos := int64(uint64(i[1])<<32 | uint64(i[0]))
			day := int64(int32(i[2])) - 2440588 // Julian day of 1970-01-01
			return time.Unix(day*86400, nanos).UTC()
		}
	}
	switch l.unit {
	case time.Millisecond:
		return func(v parquet.Value) time.Time { return time.UnixMilli(v.Int64()).UTC() }
	case time.Microsecond:
		return func(v parquet.Value) time.Time { return time.UnixMicro(v.Int64()).UTC() }
	}
	return func(v parquet.Value) time.Time { return time.Unix(0, v.Int64()).UTC() }
}

func (l leaf) numberEncoder() appendFunc {
	switch l.kind {
	case kUint:
		if l.phys == format.Int32 {
			return func(dst []byte, v parquet.Value) []byte {
				return strconv.AppendUint(dst, uint64(uint32(v.Int32())), 10)
			}
		}
		return func(dst []byte, v parquet.Value) []byte { return strconv.AppendUint(dst, uint64(v.Int64()), 10) }
	case kFloat:
		if l.phys == format.Float {
			return func(dst []byte, v parquet.Value) []byte { return appendFloat(dst, float64(v.Float()), 32) }
		}
		return func(dst []byte, v parquet.Value) []byte { return appendFloat(dst, v.Double(), 64) }
	case kDecimal:
		scale := l.scale
		switch l.phys {
		case format.Int32:
			return func(dst []byte, v parquet.Value) []byte { return appendDecimalInt(dst, int64(v.Int32()), scale) }
		case format.Int64:
			return func(dst []byte, v parquet.Value) []byte { return appendDecimalInt(dst, v.Int64(), scale) }
		}
		return func(dst []byte, v parquet.Value) []byte {
			return appendDecimal(dst, twosComplement(v.ByteArray()), scale)
		}
	}
	if l.phys == format.Int32 {
		return func(dst []byte, v parquet.Value) []byte { return strconv.AppendInt(dst, int64(v.Int32()), 10) }
	}
	return func(dst []byte, v parquet.Value) []byte { return strconv.AppendInt(dst, v.Int64(), 10) }
}

func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

// twosComplement reads a big-endian two's complement integer.
func twosComplement(b []byte) *big.Int {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
	}
	return n
}

// appendDecimalInt is appendDecimal without allocating.
func appendDecimalInt(dst []byte, unscaled int64, scale int) []byte {
	if unscaled == math.MinInt64 {
		return appendDecimal(dst, big.NewInt(unscaled), scale)
	}
	if unscaled < 0 {
		dst = append(dst, '-')
		unscaled = -unscaled
	}
	var buf [24]byte
	return appendScaled(dst, strconv.AppendInt(buf[:0], unscaled, 10), scale)
}

// appendDecimal writes unscaled × 10^-scale exactly.
func appendDecimal(dst []byte, unscaled *big.Int, scale int) []byte {
	if unscaled.Sign() < 0 {
		dst = append(dst, '-')
		unscaled = new(big.Int).Neg(unscaled)
	}
	return appendScaled(dst, unscaled.Append(nil, 10), scale)
}

// appendScaled writes the decimal digits of a non-negative number with
// the point scale digits from the right.
func appendScaled(dst, digits []byte, scale int) []byte {
	if scale <= 0 {
		dst = append(dst, digits...)
		for range -scale {
			dst = append(dst, '0')
		}
		return dst
	}
	if len(digits) <= scale {
		dst = append(dst, '0', '.')
		for range scale - len(digits) {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	dst = append(dst, digits[:len(digits)-scale]...)
	dst = append(dst, '.')
	return append(dst, digits[len(digits)-scale:]...)
}

func appendDate(dst []byte, v parquet.Value) []byte {
	return time.Unix(int64(v.Int32())*86400, 0).UTC().AppendFormat(dst, "2006-01-02")
}

func appendUUID(dst []byte, v parquet.Value) []byte {
	b := v.ByteArray()
	if len(b) != 16 {
		return appendText(dst, b)
	}
	dst = hex.AppendEncode(dst, b[0:4])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, b[4:6])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, b[6:8])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, b[8:10])
	dst = append(dst, '-')
	return hex.AppendEncode(dst, b[10:16])
}

// convertedName names a legacy annotation for messages.
func convertedName(c deprecated.ConvertedType) string {
	names := [...]string{"UTF8", "MAP", "MAP_KEY_VALUE", "LIST", "ENUM", "DECIMAL", "DATE", "TIME_MILLIS",
		"TIME_MICROS", "TIMESTAMP_MILLIS", "TIMESTAMP_MICROS", "UINT_8", "UINT_16", "UINT_32", "UINT_64",
		"INT_8", "INT_16", "INT_32", "INT_64", "JSON", "BSON", "INTERVAL"}
	if c >= 0 && int(c) < len(names) {
		return names[c]
	}
	return fmt.Sprintf("converted type %d", int(c))
}
