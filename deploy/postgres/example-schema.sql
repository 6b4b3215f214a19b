-- The tables deploy/idem.yaml loads: one dataset per strategy. Run as the
-- owner of the warehouse (not as idem's role), before grants.sql.
-- e2e/grants_test.go runs this file, `idem migrate`, grants.sql,
-- then `idem serve` under the role grants.sql sets up.
CREATE SCHEMA IF NOT EXISTS staging;
CREATE SCHEMA IF NOT EXISTS analytics;
CREATE SCHEMA IF NOT EXISTS raw;

-- Sources: written by upstream jobs, read by idem.
CREATE TABLE IF NOT EXISTS staging.orders (
    order_id bigint, customer_id bigint, total numeric(12,2), status text, event_date date);
CREATE TABLE IF NOT EXISTS staging.customers (
    customer_id bigint, name text, tier text, updated_at timestamptz);
CREATE TABLE IF NOT EXISTS staging.events (
    event_id text, event_date date, kind text, amount numeric(12,2));

-- delete_insert target, partitioned by day: a day with its own child is
-- replaced by TRUNCATE of that child (needs TRUNCATE on the child), any
-- other day by DELETE through the parent.
CREATE TABLE IF NOT EXISTS analytics.fact_orders (
    order_id bigint, customer_id bigint, total numeric(12,2), status text, event_date date NOT NULL
) PARTITION BY RANGE (event_date);
CREATE TABLE IF NOT EXISTS analytics.fact_orders_2026_11_25 PARTITION OF analytics.fact_orders
    FOR VALUES FROM ('2026-11-25') TO ('2026-11-26');
CREATE TABLE IF NOT EXISTS analytics.fact_orders_2026_11_26 PARTITION OF analytics.fact_orders
    FOR VALUES FROM ('2026-11-26') TO ('2026-11-27');
CREATE TABLE IF NOT EXISTS analytics.fact_orders_default PARTITION OF analytics.fact_orders DEFAULT;

-- merge target: the key needs a unique index.
CREATE TABLE IF NOT EXISTS analytics.dim_customers (
    customer_id bigint PRIMARY KEY, name text, tier text, updated_at timestamptz);

-- append_dedupe target: run_id and load_seq are idem's; the view
-- raw.latest_events is created by idem.
CREATE TABLE IF NOT EXISTS raw.events (
    event_id text, event_date date, kind text, amount numeric(12,2), run_id text, load_seq bigint);

-- Demo rows, fixed dates: a load never depends on the clock.
TRUNCATE staging.orders, staging.customers, staging.events;
INSERT INTO staging.orders
SELECT d * 100 + i, (i % 7) + 1, round((i * 13.7 + d)::numeric, 2),
       (ARRAY['placed', 'paid', 'shipped'])[i % 3 + 1], date '2026-11-25' + d
  FROM generate_series(0, 3) d, generate_series(1, 25) i;
INSERT INTO staging.customers
SELECT c, 'customer ' || c, (ARRAY['bronze', 'silver', 'gold'])[c % 3 + 1],
       timestamptz '2026-11-28 09:00:00+00' + c * interval '1 minute'
  FROM generate_series(1, 7) c;
INSERT INTO staging.events
SELECT 'ev-' || d || '-' || i, date '2026-11-25' + d, (ARRAY['view', 'click', 'buy'])[i % 3 + 1], i * 1.5
  FROM generate_series(0, 3) d, generate_series(1, 12) i;
