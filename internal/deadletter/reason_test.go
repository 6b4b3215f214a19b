package deadletter

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// reasoned is a fatal error that names its reason, as handlers.FatalError
// does (package deadletter_test checks the real one).
type reasoned struct{ reason, text string }

func (e *reasoned) Error() string       { return e.reason + ": " + e.text }
func (e *reasoned) Fatal() bool         { return true }
func (e *reasoned) FatalReason() string { return e.reason }

// unnamed is a fatal error that names no reason, as internal/checks' refusal.
type unnamed struct{ text string }

func (e *unnamed) Error() string { return e.text }
func (e *unnamed) Fatal() bool   { return true }

func TestErrReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("schema_mismatch: not classified"), ""},
		{&reasoned{"schema_mismatch", "x"}, "schema_mismatch"},
		{fmt.Errorf("attempt 2: %w", &reasoned{"check_failed", "x"}), "check_failed"},
		{&unnamed{"check_failed: row_count: 0 failing"}, ""},
		{&reasoned{"Not A Word", "x"}, ""},
	} {
		require.Equal(t, c.want, errReason(c.err), "%v", c.err)
	}
}

func TestLetterReason(t *testing.T) {
	for _, c := range []struct {
		kind         Kind
		header, text string
		want         string
	}{
		{KindFatal, "schema_mismatch", "anything", "schema_mismatch"},
		{KindFatal, "", "schema_mismatch: ERROR: column \"note\" does not exist", "schema_mismatch"},
		{KindFatal, "", "check_failed: row_count: 0 failing (min 1)", "check_failed"},
		{KindFatal, "Bad Header", "invalid_event: not JSON", "invalid_event"},
		{KindFatal, "", "invalid event: body is not JSON", ""},
		{KindFatal, "", "ERROR: relation does not exist", ""},
		{KindFatal, "", "no colon", ""},
		{KindFatal, "", "", ""},
		{KindExhausted, "", "transient: serialization_failure (40001)", ""},
		{KindCrashed, "", "timeout: the process stopped", ""},
		{"", "", "schema_mismatch: written by hand, no kind", ""},
	} {
		require.Equal(t, c.want, letterReason(c.kind, c.header, c.text), "%+v", c)
	}
}

// The reason comes back from the new header, and from the text of dead
// letters stored before it existed; a filter selects by it exactly.
func TestListReason(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	withErr := func(seq uint64, kind Kind, dataset string, err error) uint64 {
		e := orders(seq, kind, "2026-11-28T03:00:00Z")
		e.Dataset, e.Err = dataset, err
		return w.deadLetter(e)
	}
	named := withErr(1, KindFatal, "orders", &reasoned{"schema_mismatch", `column "note" does not exist`})
	old := withErr(2, KindFatal, "orders", errors.New(`schema_mismatch: ERROR: column "note" is of type integer (SQLSTATE 42804)`))
	check := withErr(3, KindFatal, "orders", &unnamed{"check_failed: row_count: 0 failing (min 1)"})
	exhausted := withErr(4, KindExhausted, "orders", errors.New("transient: serialization_failure"))
	other := withErr(5, KindFatal, "customers", &reasoned{"schema_mismatch", "x"})
	prefix := withErr(6, KindFatal, "orders", &reasoned{"schema", "x"})

	m, err := w.dlq.GetMsg(ctx, named)
	require.NoError(t, err)
	require.Equal(t, "schema_mismatch", m.Header.Get(HeaderErrorReason))
	m, err = w.dlq.GetMsg(ctx, old)
	require.NoError(t, err)
	require.NotContains(t, m.Header, HeaderErrorReason, "an error that names no reason writes no header")

	all, err := w.store.List(ctx, Filter{}, false)
	require.NoError(t, err)
	reasons := map[uint64]string{}
	for _, l := range all {
		reasons[l.Seq] = l.Reason
	}
	require.Equal(t, map[uint64]string{named: "schema_mismatch", old: "schema_mismatch", check: "check_failed",
		exhausted: "", other: "schema_mismatch", prefix: "schema"}, reasons)

	for _, c := range []struct {
		f    Filter
		want []uint64
	}{
		{Filter{Reason: "schema_mismatch"}, []uint64{named, old, other}},
		{Filter{Reason: "schema_mismatch", Dataset: "orders"}, []uint64{named, old}},
		{Filter{Reason: "check_failed", Dataset: "orders"}, []uint64{check}},
		{Filter{Reason: "schema"}, []uint64{prefix}},
		{Filter{Reason: "transient"}, []uint64{}},
		{Filter{Reason: "schema_mismatch", Kind: KindExhausted}, []uint64{}},
	} {
		got, err := w.store.List(ctx, c.f, false)
		require.NoError(t, err)
		require.Equal(t, c.want, seqs(got), "%+v", c.f)
	}
}
