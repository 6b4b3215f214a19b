package schemas

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// PartitionType is how a dataset names its partitions (the config's
// partition_type).
type PartitionType string

const (
	// PartitionDate is a calendar day, YYYY-MM-DD; the default.
	PartitionDate PartitionType = "date"
	// PartitionHour is one UTC hour. Its canonical form is
	// 2026-11-28T13:00:00Z; 2026-11-28T13 and RFC 3339 timestamps with an
	// offset that land exactly on an hour are accepted and normalised to UTC.
	PartitionHour PartitionType = "timestamp"
	// PartitionText is any 1-200 printable characters, taken as is.
	PartitionText PartitionType = "text"
)

// MaxPartitionChars bounds every partition key, whatever its type.
const MaxPartitionChars = 200

// Layouts of the accepted partition forms.
const (
	dateLayout      = "2006-01-02"
	hourLayout      = "2006-01-02T15:04:05Z" // canonical, always UTC
	shortHourLayout = "2006-01-02T15"
)

// Valid reports whether t is a known partition type. The empty type is not
// valid: config defaults it to PartitionDate before anything asks.
func (t PartitionType) Valid() bool {
	switch t {
	case PartitionDate, PartitionHour, PartitionText:
		return true
	}
	return false
}

// Partition is a parsed partition key.
type Partition struct {
	Type PartitionType
	// Key is the canonical text, the one to store and compare:
	// "2026-11-28", "2026-11-28T13:00:00Z", or the text itself.
	Key string
	// Time is UTC midnight for a date, the hour for a timestamp, and the zero
	// time for text.
	Time time.Time
}

// ParsePartition parses s as a partition of type t. It is strict: no
// surrounding space, no impossible dates (2026-02-30), years 0001-9999 only
// (what both Go and Postgres can represent). Errors are *InvalidEventError
// with Field "partition".
func ParsePartition(t PartitionType, s string) (Partition, error) {
	switch t {
	case PartitionDate:
		return parseDate(s)
	case PartitionHour:
		return parseHour(s)
	case PartitionText:
		return parseText(s)
	}
	return Partition{}, invalid("partition", fmt.Sprintf("the dataset's partition_type %s is unknown; want date, timestamp or text", quote(string(t))))
}

// LogicalDate is the partition's day at UTC midnight, the audit table's
// logical_date. Text partitions have none.
func (p Partition) LogicalDate() (time.Time, bool) {
	switch p.Type {
	case PartitionDate, PartitionHour:
		y, m, d := p.Time.UTC().Date()
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC), true
	}
	return time.Time{}, false
}

func parseDate(s string) (Partition, error) {
	// time.Parse already rejects 2026-02-30 and 2026-13-01; the length and
	// round-trip checks make sure nothing looser slips through.
	t, err := time.Parse(dateLayout, s)
	if len(s) != len(dateLayout) || err != nil || t.Format(dateLayout) != s || !inYearRange(t) {
		return Partition{}, invalid("partition", fmt.Sprintf("%s is not a calendar date; want YYYY-MM-DD between 0001-01-01 and 9999-12-31, e.g. 2026-11-28", quote(s)))
	}
	return Partition{Type: PartitionDate, Key: s, Time: t}, nil
}

func parseHour(s string) (Partition, error) {
	bad := func(why string) (Partition, error) {
		return Partition{}, invalid("partition", fmt.Sprintf("%s is not an hour: %s; want e.g. 2026-11-28T13:00:00Z or 2026-11-28T13", quote(s), why))
	}
	var t time.Time
	var err error
	if len(s) == len(shortHourLayout) {
		t, err = time.Parse(shortHourLayout, s)
		if err != nil || t.Format(shortHourLayout) != s {
			return bad("not a real date and hour 00-23")
		}
	} else {
		// RFC 3339 here also takes fractional seconds; they are fine as long as
		// they are zero, which the on-the-hour check below enforces.
		t, err = time.Parse(time.RFC3339, s)
		if err != nil {
			return bad("not an RFC 3339 timestamp with a zone")
		}
	}
	t = t.UTC()
	if t.Truncate(time.Hour) != t {
		return bad("minutes, seconds and fractions must be zero in UTC")
	}
	if !inYearRange(t) {
		return bad("the year must be 0001-9999 in UTC")
	}
	return Partition{Type: PartitionHour, Key: t.Format(hourLayout), Time: t}, nil
}

func parseText(s string) (Partition, error) {
	n := utf8.RuneCountInString(s)
	switch {
	case n == 0:
		return Partition{}, invalid("partition", "is empty; want 1-200 printable characters")
	case n > MaxPartitionChars:
		return Partition{}, invalid("partition", fmt.Sprintf("has %d characters; the limit is %d", n, MaxPartitionChars))
	case !printable(s):
		return Partition{}, invalid("partition", "contains "+firstUnprintable(s)+"; only printable characters are allowed")
	}
	return Partition{Type: PartitionText, Key: s}, nil
}

func inYearRange(t time.Time) bool {
	return t.Year() >= 1 && t.Year() <= 9999
}
