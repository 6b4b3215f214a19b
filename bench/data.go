package bench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/strategies"
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

func splitTable(t string) strategies.Table {
	s, n, _ := strings.Cut(t, ".")
	return strategies.Table{Schema: s, Name: n}
}

// handlerFor builds idem's handler for one dataset over db, as `idem serve`
// builds it from the config.
func handlerFor(db handlers.DB, d dataset) (*handlers.Handler, error) {
	spec := strategies.Spec{
		Dataset: d.Name, Target: splitTable(d.Target), Source: d.Source,
		PartitionColumn: d.PartitionColumn, Key: d.Key,
	}
	if d.View != "" {
		spec.View = splitTable(d.View)
	}
	st, err := strategies.New(d.Strategy, spec)
	if err != nil {
		return nil, err
	}
	return &handlers.Handler{
		DB: db, Pipeline: pipeline,
		Datasets: map[string]*handlers.Dataset{d.Name: {Name: d.Name, Strategy: st}},
		// idem serve logs at info; formatting is part of its cost.
		Log: zerolog.New(io.Discard).Level(zerolog.InfoLevel).With().Timestamp().Logger(),
	}, nil
}
