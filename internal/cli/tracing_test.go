package cli

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPublishAndBackfillContinueTheSchedulersTrace: with TRACEPARENT set
// (a scheduler's task) and no tracing configured, the events idem publish
// and idem backfill send carry that trace context as it came, in a
// lower-case traceparent; without it, they carry none.
func TestPublishAndBackfillContinueTheSchedulersTrace(t *testing.T) {
	w := newCLIWorld(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	w.env["TRACEPARENT"] = tp
	w.env["TRACESTATE"] = "airflow=t1"
	r := w.run("publish", "orders", "2026-03-01", "--run-id", "traced")
	require.NoError(t, r.e, r.err)
	r = w.run("backfill", "orders", "--from", "2026-03-02", "--to", "2026-03-03", "--run-id", "traced-bf")
	require.NoError(t, r.e, r.err)
	delete(w.env, "TRACEPARENT")
	delete(w.env, "TRACESTATE")
	r = w.run("publish", "orders", "2026-03-04", "--run-id", "untraced")
	require.NoError(t, r.e, r.err)

	s, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(t, err)
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		require.Equal(t, []string{tp}, m.Header["traceparent"], "event %d: the scheduler's trace, lower case", seq)
		require.Equal(t, []string{"airflow=t1"}, m.Header["tracestate"])
		require.Empty(t, m.Header["Traceparent"])
	}
	m, err := s.GetMsg(context.Background(), 4)
	require.NoError(t, err)
	require.Empty(t, m.Header.Get("traceparent"), "no trace to continue")
}
