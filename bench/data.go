package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/service"
)

// One row shape (an orders table) for every measurement, so idem and the
// bare statements load the same rows.
const (
	rowCols = "order_id, customer_id, total, status, event_date, updated_at"
	rowDDL  = "(order_id bigint, customer_id bigint, total numeric(12,2), status text, event_date date, updated_at timestamptz)"
)

// rowsSQL selects perDay rows for each of days days from base+firstDay,
// physically ordered by date then order_id; order_id is unique per table.
func rowsSQL(base string, firstDay, days, perDay int) string {
	return fmt.Sprintf(`SELECT d::bigint * %[4]d + i AS order_id,
       (d::bigint * 7919 + i * 31) %% 100000 AS customer_id,
       ((d * 37 + i * 101) %% 100000) / 100.0 AS total,
       (ARRAY['new', 'paid', 'shipped', 'cancelled'])[1 + (d + i) %% 4] AS status,
       date '%[1]s' + d AS event_date,
       timestamptz '%[1]s 00:00:00+00' + d * interval '1 day' + i * interval '1 second' AS updated_at
  FROM generate_series(%[2]d, %[2]d + %[3]d - 1) d, generate_series(1, %[4]d) i`, base, firstDay, days, perDay)
}

func day(base string, i int) time.Time {
	t, _ := time.Parse(time.DateOnly, base)
	return t.AddDate(0, 0, i)
}

func dayKey(base string, i int) string { return day(base, i).Format(time.DateOnly) }

// handlerFor builds idem's handler for one dataset over db from the config
// the harness writes for `idem serve`, through the same wiring.
func handlerFor(db handlers.DB, d dataset) (*handlers.Handler, error) {
	cfg, err := config.Parse([]byte("pipeline: "+pipeline+"\ndatasets:\n"+d.yaml()), nil)
	if err != nil {
		return nil, err
	}
	dss, err := service.Datasets(cfg)
	if err != nil {
		return nil, err
	}
	return &handlers.Handler{
		DB: db, Pipeline: cfg.Pipeline, Datasets: dss,
		// As idem serve: every load writes its event's result.
		Results: true,
		// idem serve logs at info; formatting is part of its cost.
		Log: zerolog.New(io.Discard).Level(zerolog.InfoLevel).With().Timestamp().Logger(),
	}, nil
}
