package e2e

// The JSON API under /api/v1/ of a running `idem serve`, on real NATS and
// PostgreSQL: what it says of a load and of a dead letter is the audit.

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type apiV1Partition struct {
	Status string  `json:"status"`
	RunID  *string `json:"run_id"`
	Rows   *struct {
		Inserted int64  `json:"inserted"`
		Updated  int64  `json:"updated"`
		Deleted  *int64 `json:"deleted"`
	} `json:"rows"`
	Error     *string `json:"error"`
	ErrorKind *string `json:"error_kind"`
	Attempts  struct {
		Count int64 `json:"count"`
	} `json:"attempts"`
}

func getAPIv1(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.NoError(t, json.Unmarshal(body, v), "%s", body)
	return resp.StatusCode
}

func TestAPIOnARunningServe(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{noRetries: true, orderFields: "    expect: {every: day, from: 2026-11-01, deadline: 1h}\n"})
	w.streams()
	// 11-02 has no source rows: fatal, dead-lettered.
	w.db.Exec(t, "DELETE FROM staging.src WHERE event_date = '2026-11-02'")
	p := w.serve()
	w.publish("2026-11-01", "r1", nil)
	w.publish("2026-11-02", "r2", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitDeadLetters(1)
	base := "http://" + p.httpAddr() + "/api/v1"

	var ok apiV1Partition
	require.Equal(t, http.StatusOK, getAPIv1(t, base+"/partitions/orders/2026-11-01", &ok))
	require.Equal(t, "success", ok.Status)
	require.Equal(t, "r1", *ok.RunID)
	require.NotNil(t, ok.Rows)
	require.EqualValues(t, 10, ok.Rows.Inserted)
	require.Equal(t, w.count("SELECT rows_inserted FROM idem.pipeline_audit WHERE partition_key = '2026-11-01' AND status = 'success'"), ok.Rows.Inserted)
	require.Equal(t, w.count("SELECT rows_updated FROM idem.pipeline_audit WHERE partition_key = '2026-11-01' AND status = 'success'"), ok.Rows.Updated)
	require.EqualValues(t, 1, ok.Attempts.Count)
	require.Nil(t, ok.Error)

	// The dead-letter stream is listed every few seconds: until then the
	// fatal attempt is only failed.
	var dead apiV1Partition
	for deadline := time.Now().Add(30 * time.Second); ; {
		dead = apiV1Partition{}
		if getAPIv1(t, base+"/partitions/orders/2026-11-02", &dead) == http.StatusOK && dead.Status == "dead_lettered" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders 2026-11-02: want dead_lettered, got %s", dead.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Equal(t, "r2", *dead.RunID)
	require.Equal(t, "fatal", *dead.ErrorKind)
	require.Contains(t, *dead.Error, "empty_source")
	require.Nil(t, dead.Rows)

	// The calendar's gaps: 11-02 dead-lettered, 11-03 never attempted.
	var missing struct {
		Expected   int `json:"expected"`
		Partitions []struct {
			Partition string `json:"partition"`
			Status    string `json:"status"`
		} `json:"partitions"`
	}
	require.Equal(t, http.StatusOK, getAPIv1(t, base+"/datasets/orders/missing?from=2026-11-01&to=2026-11-03", &missing))
	require.Equal(t, 3, missing.Expected)
	require.Len(t, missing.Partitions, 2)
	require.Equal(t, []string{"2026-11-02 dead_lettered", "2026-11-03 late"},
		[]string{missing.Partitions[0].Partition + " " + missing.Partitions[0].Status, missing.Partitions[1].Partition + " " + missing.Partitions[1].Status})

	// The dataset's partition type decides what a key is.
	var e struct{ Error string }
	require.Equal(t, http.StatusBadRequest, getAPIv1(t, base+"/partitions/orders/2026-11-31", &e))
	require.Contains(t, e.Error, "is not a calendar date")
	require.Equal(t, http.StatusNotFound, getAPIv1(t, base+"/partitions/shipments/2026-11-01", &e))
}
