package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/consumer"
)

// TestDatasetsStartDeadLettersAtZero: every label pair the alert rules can
// see exists before the first dead letter, and a reload adds the new
// dataset's without resetting the others.
func TestDatasetsStartDeadLettersAtZero(t *testing.T) {
	m := New("test")
	require.Zero(t, testutil.CollectAndCount(m.DeadLetters), "no series before Datasets")
	m.Datasets([]string{"orders"})
	require.Equal(t, 6, testutil.CollectAndCount(m.DeadLetters), "orders and _invalid, three kinds each")
	require.Equal(t, 2, testutil.CollectAndCount(m.Events), "dead_letter_failed of orders and _invalid")
	m.Hooks().DeadLetter("orders", consumer.Kind("fatal"))

	m.Datasets([]string{"orders", "clicks"})
	require.NoError(t, testutil.CollectAndCompare(m.DeadLetters, strings.NewReader(`
# HELP idem_dead_letters_total Dead letters acknowledged by the DLQ stream, by kind (fatal, exhausted, crashed).
# TYPE idem_dead_letters_total counter
idem_dead_letters_total{dataset="_invalid",kind="crashed"} 0
idem_dead_letters_total{dataset="_invalid",kind="exhausted"} 0
idem_dead_letters_total{dataset="_invalid",kind="fatal"} 0
idem_dead_letters_total{dataset="clicks",kind="crashed"} 0
idem_dead_letters_total{dataset="clicks",kind="exhausted"} 0
idem_dead_letters_total{dataset="clicks",kind="fatal"} 0
idem_dead_letters_total{dataset="orders",kind="crashed"} 0
idem_dead_letters_total{dataset="orders",kind="exhausted"} 0
idem_dead_letters_total{dataset="orders",kind="fatal"} 1
`)))
}

// TestTracingCountersReadTheProvider: the span counters exist from the
// start and read their functions at each scrape.
func TestTracingCountersReadTheProvider(t *testing.T) {
	m := New("test")
	var dropped, failed uint64
	m.Tracing(func() uint64 { return dropped }, func() uint64 { return failed })
	dropped, failed = 3, 7
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP idem_trace_spans_dropped_total Spans dropped because the export queue was full (the collector slower than idem, or down); loads do not wait for it.
# TYPE idem_trace_spans_dropped_total counter
idem_trace_spans_dropped_total 3
# HELP idem_trace_spans_failed_total Spans whose export to the collector failed (unreachable, refused); they are not retried.
# TYPE idem_trace_spans_failed_total counter
idem_trace_spans_failed_total 7
`), "idem_trace_spans_dropped_total", "idem_trace_spans_failed_total"))
}
