package schemas

import (
	"fmt"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestPartitionTypeValid(t *testing.T) {
	for _, typ := range []PartitionType{PartitionDate, PartitionHour, PartitionText} {
		assert.True(t, typ.Valid(), typ)
	}
	for _, typ := range []PartitionType{"", "Date", "hour", "weekly"} {
		assert.False(t, typ.Valid(), typ)
	}
}

func TestParsePartition(t *testing.T) {
	hour := time.Date(2026, 11, 28, 13, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		typ     PartitionType
		in, key string
		time    time.Time
	}{
		{PartitionDate, "2026-11-28", "2026-11-28", time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)},
		{PartitionDate, "0001-01-01", "0001-01-01", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{PartitionDate, "9999-12-31", "9999-12-31", time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)},
		{PartitionHour, "2026-11-28T13:00:00Z", "2026-11-28T13:00:00Z", hour},
		{PartitionHour, "2026-11-28T13", "2026-11-28T13:00:00Z", hour},
		{PartitionHour, "2026-11-28T13:00:00.000Z", "2026-11-28T13:00:00Z", hour},
		{PartitionHour, "2026-11-28T08:00:00-05:00", "2026-11-28T13:00:00Z", hour},
		{PartitionHour, "2026-11-29T02:45:00+13:45", "2026-11-28T13:00:00Z", hour},
		{PartitionText, "eu-west", "eu-west", time.Time{}},
		{PartitionText, " padded ", " padded ", time.Time{}},
	} {
		p, err := ParsePartition(c.typ, c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, Partition{Type: c.typ, Key: c.key, Time: c.time}, p, c.in)
	}
	for _, c := range []struct {
		typ PartitionType
		in  string
	}{
		{PartitionDate, "2026-02-30"}, {PartitionDate, "2026-13-01"}, {PartitionDate, " 2026-11-28"},
		{PartitionDate, "2026-11-28\n"}, {PartitionDate, "2026/11/28"}, {PartitionDate, "+2026-11-28"},
		{PartitionDate, "10000-01-01"}, {PartitionDate, "２０２６-11-28"},
		{PartitionHour, "2026-11-28t13:00:00z"}, {PartitionHour, "2026-11-28T13:00:01Z"},
		{PartitionHour, "2026-11-28 13:00:00Z"}, {PartitionHour, "2026-11-28T1"}, {PartitionHour, "2026-11-28T13:00:00+25:00"},
		{PartitionHour, "0001-01-01T00:00:00+01:00"}, {PartitionHour, ""},
		{PartitionText, ""}, {PartitionText, "a\tb"}, {PartitionText, "bad\xffutf8"},
		{"", "2026-11-28"}, {"weekly", "2026-W48"},
	} {
		_, err := ParsePartition(c.typ, c.in)
		assert.Equal(t, "partition", fieldOf(t, err), "%s %q", c.typ, c.in)
	}
}

func TestLogicalDate(t *testing.T) {
	d, ok := mustParse(t, PartitionHour, "2026-11-28T23:00:00-05:00").LogicalDate()
	assert.True(t, ok)
	assert.Equal(t, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), d)

	d, ok = mustParse(t, PartitionDate, "2026-11-28").LogicalDate()
	assert.True(t, ok)
	assert.Equal(t, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), d)

	_, ok = mustParse(t, PartitionText, "2026-11-28").LogicalDate()
	assert.False(t, ok)
}

// TestParsePartitionProperties: every real date and hour in range parses to
// itself, whatever the offset it is written with; any canonical key parses
// back to the same partition.
func TestParsePartitionProperties(t *testing.T) {
	t.Run("dates", rapid.MakeCheck(func(t *rapid.T) {
		y := rapid.IntRange(0, 10000).Draw(t, "year")
		m := rapid.IntRange(0, 13).Draw(t, "month")
		d := rapid.IntRange(0, 32).Draw(t, "day")
		s := fmt.Sprintf("%04d-%02d-%02d", y, m, d)
		want := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
		real := y >= 1 && y <= 9999 && want.Year() == y && int(want.Month()) == m && want.Day() == d
		p, err := ParsePartition(PartitionDate, s)
		if real != (err == nil) {
			t.Fatalf("%s: real date %v, error %v", s, real, err)
		}
		if real && (p.Key != s || !p.Time.Equal(want)) {
			t.Fatalf("%s parsed as %#v", s, p)
		}
	}))
	t.Run("hours", rapid.MakeCheck(func(t *rapid.T) {
		at := time.Unix(rapid.Int64Range(-62135596800/3600+24, 253402300799/3600-24).Draw(t, "hour")*3600, 0).UTC()
		offset := rapid.IntRange(-14*60, 14*60).Draw(t, "offset_minutes")
		written := at.In(time.FixedZone("", offset*60)).Format(time.RFC3339)
		p, err := ParsePartition(PartitionHour, written)
		if err != nil {
			t.Fatalf("%s: %v", written, err)
		}
		if p.Key != at.Format(hourLayout) || !p.Time.Equal(at) {
			t.Fatalf("%s parsed as %#v, want %s", written, p, at)
		}
		short, err := ParsePartition(PartitionHour, at.Format(shortHourLayout))
		if err != nil || short != p {
			t.Fatalf("short form %s: %#v, %v", at.Format(shortHourLayout), short, err)
		}
	}))
	t.Run("text", rapid.MakeCheck(func(t *rapid.T) {
		s := rapid.StringOfN(rapid.RuneFrom(nil, unicode.L, unicode.N, unicode.P, unicode.S, unicode.M), 1, MaxPartitionChars, -1).Draw(t, "text")
		p, err := ParsePartition(PartitionText, s)
		if err != nil || p.Key != s {
			t.Fatalf("%q: %#v, %v", s, p, err)
		}
	}))
	t.Run("canonical keys are fixed points", rapid.MakeCheck(func(t *rapid.T) {
		typ := rapid.SampledFrom([]PartitionType{PartitionDate, PartitionHour, PartitionText}).Draw(t, "type")
		s := rapid.OneOf(rapid.String(), rapid.StringMatching(`[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}(:00:00(Z|[+-][0-9]{2}:[0-9]{2}))?)?`)).Draw(t, "input")
		p, err := ParsePartition(typ, s)
		if err != nil {
			return
		}
		again, err := ParsePartition(typ, p.Key)
		if err != nil || again != p {
			t.Fatalf("%q -> %#v -> %#v, %v", s, p, again, err)
		}
	}))
}
