package results

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAppendJSONIsEncodingJSON: the hand-written encoding writes exactly
// what encoding/json writes, for hostile strings, every optional field
// present or absent, and numbers of every size.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	hostile := []string{
		"", "plain", `quo"te`, `back\slash`, "new\nline\r\ttab", "\b\f\x00\x01\x1f\x7f",
		"<script>&amp;</script>", "\u2028\u2029", "é日本語🙂", "\xff\xfe bad utf-8 \xc3", "'; DROP TABLE x; --",
		"$(rm -rf /)", "\u00e9\u0301", string([]byte{0xed, 0xa0, 0x80}), // a UTF-16 surrogate, invalid in UTF-8
	}
	pub := time.Date(2026, 11, 28, 1, 2, 3, 456789000, time.UTC)
	base := Result{
		Pipeline: "p", Dataset: "orders", Partition: "2026-11-28", RunID: "scheduled__2026-11-28", Status: StatusLoaded,
		Rows: &Rows{Inserted: 10, Updated: 0, Deleted: -1}, Attempts: 2, ErrorKind: "fatal", Error: "boom",
		FailedChecks: []string{"row_count", "unique"}, Stream: "IDEM_EVENTS", StreamSeq: 1<<64 - 1, MsgID: "m",
		AuditID: 42, LoadedBy: 7, DeadLetterSeq: 3, PublishedAt: &pub, FinishedAt: pub.Add(time.Second), Seconds: 1.5,
	}
	same := func(r Result) {
		t.Helper()
		want, err := json.Marshal(r)
		require.NoError(t, err)
		require.Equal(t, string(want), string(r.AppendJSON(nil)))
	}
	same(base)
	same(Result{})
	for _, s := range hostile {
		r := base
		r.Pipeline, r.Dataset, r.Partition, r.RunID, r.Error, r.Stream, r.MsgID = s, s, s, s, s, s, s
		r.FailedChecks = []string{s, s}
		same(r)
	}
	for _, f := range []float64{0, 1e-7, 1e-6, 0.000123, 1, 123456.789, 1e20, 1e21, 1.5e300, -2.5e-9} {
		r := base
		r.Seconds = f
		same(r)
	}
	for _, at := range []time.Time{{}, pub, pub.In(time.FixedZone("x", -5*3600)), time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC)} {
		r := base
		r.FinishedAt = at
		same(r)
	}
	// Random fields, random bytes in every string (a fixed seed).
	rng := rand.New(rand.NewPCG(20261202, 1))
	str := func() string {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	for range 2000 {
		r := Result{Pipeline: str(), Dataset: str(), Partition: str(), RunID: str(), Status: str(), Attempts: rng.IntN(5),
			Stream: str(), StreamSeq: rng.Uint64(), FinishedAt: pub.Add(time.Duration(rng.Int64N(1e15))), Seconds: rng.Float64() * 1e3}
		if rng.IntN(2) == 0 {
			r.Rows = &Rows{Inserted: rng.Int64(), Updated: rng.Int64N(100), Deleted: rng.Int64N(100) - 1}
		}
		if rng.IntN(2) == 0 {
			r.ErrorKind, r.Error, r.FailedChecks = str(), str(), []string{str()}
		}
		if rng.IntN(2) == 0 {
			r.MsgID, r.AuditID, r.LoadedBy, r.DeadLetterSeq = str(), rng.Int64(), rng.Int64N(9), rng.Uint64N(9)
		}
		if rng.IntN(2) == 0 {
			p := pub.Add(-time.Duration(rng.Int64N(1e12)))
			r.PublishedAt = &p
		}
		same(r)
	}
}
