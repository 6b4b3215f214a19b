package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/lineagetest"
)

// marquez stands in for an OpenLineage backend: it keeps every event
// POSTed to /api/v1/lineage, or answers 503 while down.
type marquez struct {
	mu     sync.Mutex
	events []map[string]any
	bodies [][]byte // as received, for the schema check
	down   atomic.Bool
	srv    *httptest.Server
}

func newMarquez(t *testing.T) *marquez {
	m := &marquez{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/lineage" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if m.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.events = append(m.events, ev)
		m.bodies = append(m.bodies, body)
		m.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(m.srv.Close)
	// Every event received, whatever the test looked at, validates against
	// the OpenLineage schemas.
	t.Cleanup(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, b := range m.bodies {
			lineagetest.Validate(t, b)
		}
		t.Logf("%d lineage events received, each valid against the OpenLineage schemas", len(m.bodies))
	})
	return m
}

// of returns the events of run_id runID (the idem_run facet), in arrival order.
func (m *marquez) of(runID string) []map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []map[string]any
	for _, ev := range m.events {
		if f, ok := dig(ev, "run", "facets", "idem_run").(map[string]any); ok && f["runId"] == runID {
			out = append(out, ev)
		}
	}
	return out
}

func (m *marquez) wait(t *testing.T, runID string, n int) []map[string]any {
	t.Helper()
	var evs []map[string]any
	require.Eventually(t, func() bool { evs = m.of(runID); return len(evs) >= n }, 60*time.Second, 50*time.Millisecond,
		"want %d lineage events of run %s", n, runID)
	return evs
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func types(evs []map[string]any) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprint(e["eventType"]))
	}
	return out
}

// TestLineageEvents: with lineage configured, a load emits START and
// COMPLETE (job, run, output, inputs, row count, the scheduler's parent);
// a fatal load START and FAIL; a retried load START/FAIL for the failed
// attempt and START/COMPLETE for the success, each attempt its own run; a
// receiver down for a while receives everything afterwards, once.
func TestLineageEvents(t *testing.T) {
	mq := newMarquez(t)
	w := newWorld(t, opts{ackWait: "2s", timeout: "1s", extraYAML: "lineage:\n  openlineage:\n    url: " + mq.srv.URL + "\n    namespace: e2e-ns\n"})
	p := w.serve()
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()
	wantRun := "3f1b5c3e-9d1a-4c55-8b7e-2a51f1d0c6a1"
	// As the README's Airflow snippet passes it: one attribute,
	// namespace/job/run.
	code, stdout, stderr := rbExec(t, w, []string{"publish", "orders", "2026-11-01", "--run-id", "l1",
		"--attribute", "openlineage_parent_id=airflow/shop.load_orders/" + wantRun})
	require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
	evs := mq.wait(t, "l1", 2)
	require.Equal(t, []string{"START", "COMPLETE"}, types(evs))
	for _, e := range evs {
		require.Equal(t, "e2e-ns", dig(e, "job", "namespace"))
		require.Equal(t, "e2e.orders", dig(e, "job", "name"))
		require.Equal(t, wantRun, dig(e, "run", "facets", "parent", "run", "runId"))
		require.Equal(t, "shop.load_orders", dig(e, "run", "facets", "parent", "job", "name"))
	}
	require.Equal(t, dig(evs[0], "run", "runId"), dig(evs[1], "run", "runId"), "one run per attempt")
	out := evs[1]["outputs"].([]any)[0]
	require.Regexp(t, `^postgres://127\.0\.0\.1:\d+$`, dig(out, "namespace"))
	require.Equal(t, w.db.Name+".analytics.t", dig(out, "name"))
	require.EqualValues(t, 10, dig(out, "outputFacets", "outputStatistics", "rowCount"))
	ins := evs[1]["inputs"].([]any)
	require.Len(t, ins, 1)
	require.Equal(t, w.db.Name+".staging.src", dig(ins[0], "name"))

	// Fatal: an empty partition.
	w.publish("2026-12-25", "l-fatal", nil)
	evs = mq.wait(t, "l-fatal", 2)
	require.Equal(t, []string{"START", "FAIL"}, types(evs))
	require.Contains(t, dig(evs[1], "run", "facets", "errorMessage", "message"), "empty_source")

	// A transient failure, then a success: two attempts, two runs.
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (3000)") // past the 1s statement timeout
	w.publish("2026-11-02", "l-retry", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'l-retry' AND status = 'failed'")
	w.db.Exec(t, "DELETE FROM staging.gate_on")
	evs = mq.wait(t, "l-retry", 4)
	require.Equal(t, []string{"START", "FAIL", "START", "COMPLETE"}, types(evs))
	require.NotEqual(t, dig(evs[0], "run", "runId"), dig(evs[2], "run", "runId"))
	require.Equal(t, dig(evs[2], "run", "runId"), dig(evs[3], "run", "runId"))

	// The receiver down while a load commits: nothing lost, nothing twice.
	mq.down.Store(true)
	w.publish("2026-11-03", "l-down", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE run_id = 'l-down'")
	time.Sleep(3 * time.Second)
	require.Empty(t, mq.of("l-down"))
	mq.down.Store(false)
	mq.wait(t, "l-down", 2)
	time.Sleep(2 * time.Second)
	require.Equal(t, []string{"START", "COMPLETE"}, types(mq.of("l-down")), "each once")

	// A hostile run_id is data.
	hostile := `r"}</script>,"eventType":"ABORT\u0000`
	w.publish("2026-11-04", hostile, nil)
	evs = mq.wait(t, hostile, 2)
	require.Equal(t, []string{"START", "COMPLETE"}, types(evs))
	require.Equal(t, hostile, dig(evs[1], "run", "facets", "idem_run", "runId"))
}
