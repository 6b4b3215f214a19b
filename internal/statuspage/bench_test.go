package statuspage_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/statuspage"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/browsertest"
)

// BenchmarkGrid50x400 serves the grid of 50 calendar datasets × 400 days
// over an audit of 20,000 partitions (one attempt each, 1 in 50 failed):
// the read of the audit and the rendering, as the browser asks for it.
func BenchmarkGrid50x400(b *testing.B) {
	url := gridServer(b)
	var size int
	b.ResetTimer()
	for b.Loop() {
		resp, err := http.Get(url)
		require.NoError(b, err)
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		size = int(n)
	}
	b.ReportMetric(float64(size)/1024, "KiB/page")
}

// BenchmarkGrid50x400InChromium loads the same page in headless chromium
// until the grid is laid out: what an operator waits for.
func BenchmarkGrid50x400InChromium(b *testing.B) {
	url := gridServer(b)
	ctx := browsertest.New(b)
	b.ResetTimer()
	for b.Loop() {
		require.NoError(b, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible("#grid td[data-i='399']")))
	}
}

// gridServer serves the page over 50 calendar datasets x 400 days.
func gridServer(b *testing.B) string {
	db := audittest.NewDB(b)
	ctx := context.Background()
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt, row_count, error, error_kind, finished_at)
		SELECT 'shop', 'ds' || lpad(d::text, 2, '0'), day, to_char(day, 'YYYY-MM-DD'), 'r1',
		       CASE WHEN (d + i) % 50 = 0 THEN 'failed' ELSE 'success' END, 1, 10,
		       CASE WHEN (d + i) % 50 = 0 THEN 'boom' END, CASE WHEN (d + i) % 50 = 0 THEN 'transient' END, now()
		  FROM generate_series(1, 50) d, generate_series(0, 399) i, LATERAL (SELECT date '2025-01-01' + i AS day) x;
		ANALYZE idem.pipeline_audit`)
	require.NoError(b, err)
	cal := &calendar.Expect{Every: calendar.Day, From: "2025-01-01", Deadline: 3 * time.Hour}
	dss := make([]statuspage.Dataset, 50)
	for i := range dss {
		dss[i] = statuspage.Dataset{Name: fmt.Sprintf("ds%02d", i+1), Calendar: cal}
	}
	now := time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC) // 400 ended days
	p, err := statuspage.New(statuspage.Deps{
		Pipeline: "shop", DB: db.Pool, Now: func() time.Time { return now }, Log: zerolog.Nop(),
		Datasets: func() []statuspage.Dataset { return dss },
		Health: func(context.Context) statuspage.Health {
			return statuspage.Health{WarehouseUp: true, NATS: "CONNECTED"}
		},
		DeadLetters: func(context.Context) ([]statuspage.DeadLetter, error) { return nil, nil },
	})
	require.NoError(b, err)
	srv := httptest.NewServer(p.Handler())
	b.Cleanup(srv.Close)
	return srv.URL + "/?n=400"
}
