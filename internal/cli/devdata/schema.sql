-- Demo staging data and targets for `idem dev`. Dates are fixed: nothing in a
-- load may depend on the clock.
CREATE SCHEMA IF NOT EXISTS staging;
CREATE SCHEMA IF NOT EXISTS analytics;
CREATE SCHEMA IF NOT EXISTS raw;

CREATE TABLE IF NOT EXISTS staging.orders (
    order_id bigint, customer_id bigint, total numeric(12,2), status text, event_date date);
CREATE TABLE IF NOT EXISTS analytics.fact_orders (
    order_id bigint, customer_id bigint, total numeric(12,2), status text, event_date date NOT NULL);
CREATE INDEX IF NOT EXISTS fact_orders_event_date ON analytics.fact_orders (event_date);

CREATE TABLE IF NOT EXISTS analytics.landed_orders (
    order_id bigint, total numeric(12,2), status text, event_date date NOT NULL);

CREATE TABLE IF NOT EXISTS analytics.daily_revenue (
    event_date date NOT NULL, orders bigint, revenue numeric(14,2));

CREATE TABLE IF NOT EXISTS staging.customers (
    customer_id bigint, name text, tier text, updated_at timestamptz);
CREATE TABLE IF NOT EXISTS analytics.dim_customers (
    customer_id bigint PRIMARY KEY, name text, tier text, updated_at timestamptz);

CREATE TABLE IF NOT EXISTS staging.events (
    event_id text, event_date date, kind text, amount numeric(12,2));
CREATE TABLE IF NOT EXISTS raw.events (
    event_id text, event_date date, kind text, amount numeric(12,2), run_id text, load_seq bigint);

TRUNCATE staging.orders, staging.customers, staging.events;
INSERT INTO staging.orders
SELECT d * 100 + i, (i % 7) + 1, round((i * 13.7 + d)::numeric, 2),
       (ARRAY['placed', 'paid', 'shipped'])[i % 3 + 1], date '2026-11-25' + d
  FROM generate_series(0, 3) d, generate_series(1, 25) i;
-- 2026-11-22 arrived twice (an upstream retry without dedup): the unique
-- check refuses its load.
INSERT INTO staging.orders
SELECT 2200 + i, (i % 7) + 1, i * 3.5, 'paid', date '2026-11-22'
  FROM generate_series(1, 25) i, generate_series(1, 2);
INSERT INTO staging.customers
SELECT c, 'customer ' || c, (ARRAY['bronze', 'silver', 'gold'])[c % 3 + 1],
       timestamptz '2026-11-28 09:00:00+00' + c * interval '1 minute'
  FROM generate_series(1, 7) c;
INSERT INTO staging.events
SELECT 'ev-' || d || '-' || i, date '2026-11-25' + d, (ARRAY['view', 'click', 'buy'])[i % 3 + 1], i * 1.5
  FROM generate_series(0, 3) d, generate_series(1, 12) i;
