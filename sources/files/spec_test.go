package files

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/schemas"
)

func TestSpecValidate(t *testing.T) {
	ok := Spec{URL: "s3://lake/orders/dt={partition}/", Format: CSV}
	require.NoError(t, ok.Validate())

	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"no url", func(s *Spec) { s.URL = "" }, "url: missing"},
		{"scheme", func(s *Spec) { s.URL = "gs://lake/{partition}/" }, "scheme must be s3:// or file://"},
		{"no slash", func(s *Spec) { s.URL = "s3://lake/orders/{partition}" }, "must end with /"},
		{"no placeholder", func(s *Spec) { s.URL = "s3://lake/orders/" }, "no {partition} placeholder"},
		{"bucket placeholder", func(s *Spec) { s.URL = "s3://{partition}/x/" }, "plain bucket name"},
		{"unknown placeholder", func(s *Spec) { s.URL = "s3://lake/{dataset}/{partition}/" }, "unknown placeholder {dataset}"},
		{"unclosed", func(s *Spec) { s.URL = "s3://lake/{partition/" }, "without its }"},
		{"directive", func(s *Spec) { s.URL = "s3://lake/{partition:%Y/%q}/" }, "unknown directive"},
		{"dotdot", func(s *Spec) { s.URL = "file:///data/../etc/{partition}/" }, "clean"},
		{"relative file", func(s *Spec) { s.URL = "file://data/{partition}/" }, "absolute path"},
		{"double slash", func(s *Spec) { s.URL = "s3://lake/a//{partition}/" }, "empty segment"},
		{"format", func(s *Spec) { s.Format = "xlsx" }, `format: "xlsx" is not a format`},
		{"no format", func(s *Spec) { s.Format = "" }, "format: missing"},
		{"pattern", func(s *Spec) { s.Pattern = "[" }, "not a path.Match glob"},
		{"pattern slash", func(s *Spec) { s.Pattern = "/x" }, "relative to the prefix"},
		{"two rules", func(s *Spec) { s.Ready = ReadyRule{Marker: "_SUCCESS", QuietFor: time.Minute} }, "one of marker, manifest and quiet_for"},
		{"marker path", func(s *Spec) { s.Ready.Marker = "a/_SUCCESS" }, "ready.marker"},
		{"min files alone", func(s *Spec) { s.Ready.MinFiles = 2 }, "ready.min_files: only counts with quiet_for"},
		{"zone", func(s *Spec) { s.Allow.NaiveTimestampsIn = "Mars/Olympus" }, "not an IANA time zone"},
	} {
		s := ok
		tc.edit(&s)
		err := s.Validate()
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
	}
	require.Equal(t, MinFilesDefault, Spec{Ready: ReadyRule{QuietFor: time.Minute}}.WithDefaults().Ready.MinFiles)
}

func TestResolve(t *testing.T) {
	date, err := schemas.ParsePartition(schemas.PartitionDate, "2026-11-28")
	require.NoError(t, err)
	hour, err := schemas.ParsePartition(schemas.PartitionHour, "2026-11-28T13")
	require.NoError(t, err)
	text, err := schemas.ParsePartition(schemas.PartitionText, "eu-west")
	require.NoError(t, err)

	for _, tc := range []struct {
		url  string
		p    schemas.Partition
		want string
	}{
		{"s3://lake/orders/dt={partition}/", date, "orders/dt=2026-11-28/"},
		{"s3://lake/{partition:%Y/%m/%d}/", date, "2026/11/28/"},
		{"s3://lake/o/year={partition:%Y}/day={partition:%j}/h={partition:%H}/", hour, "o/year=2026/day=332/h=13/"},
		{"s3://lake/o/{partition}/", hour, "o/2026-11-28T13:00:00Z/"},
		{"s3://lake/o/region={partition}/", text, "o/region=eu-west/"},
		{"s3://lake/o/{partition:%Y%%}/", date, "o/2026%/"},
		{"file:///data/orders/dt={partition}/", date, "dt=2026-11-28/"},
		{"file:///data/orders/{partition:%Y}/{partition:%m}/", date, "2026/11/"},
		{"file:///data/x{partition}/", date, "x2026-11-28/"},
	} {
		got, err := Resolve(Spec{URL: tc.url, Format: CSV}, tc.p)
		require.NoError(t, err, tc.url)
		require.Equal(t, tc.want, got, tc.url)
	}

	// A text partition is a value: it names one prefix, never a path.
	for _, key := range []string{"../etc", "a/b", `a\b`, "..", "."} {
		p := schemas.Partition{Type: schemas.PartitionText, Key: key}
		_, err := Resolve(Spec{URL: "file:///data/{partition}/", Format: CSV}, p)
		require.ErrorContains(t, err, "cannot name a prefix", key)
	}
	_, err = Resolve(Spec{URL: "s3://lake/{partition:%Y}/", Format: CSV}, text)
	require.ErrorContains(t, err, "needs a date or timestamp partition")
}

func TestFamilyOf(t *testing.T) {
	for typ, want := range map[string]family{
		"bigint": famInt8, "int8": famInt8, "integer": famInt4, "smallint": famInt2,
		"numeric(12,2)": famNumeric, "numeric": famNumeric, "double precision": famFloat8,
		"timestamp with time zone": famTimestamptz, "timestamp(3) with time zone": famTimestamptz,
		"timestamptz": famTimestamptz, "timestamp without time zone": famTimestamp,
		"character varying(20)": famText, "TEXT": famText, "boolean": famBool, "date": famDate,
		"uuid": famUUID, "jsonb": famJSON, "bytea": famBytea, "integer[]": famOther, "USER-DEFINED": famOther,
	} {
		require.Equal(t, want, familyOf(typ), typ)
	}
}
