-- Least privilege for idem's login role, idem_loader, on the tables of
-- deploy/postgres/example-schema.sql. Run it as the role that owns them and
-- that ran `idem migrate` (an administrator), after `idem migrate`, and again
-- after each upgrade of idem (it is idempotent):
--
--   psql "$ADMIN_DATABASE_URL" -v loader_password="$IDEM_DB_PASSWORD" -f grants.sql
--
-- idem_loader is not a superuser, owns nothing but what the notes below say,
-- cannot create or alter schema idem (so `idem serve` never migrates: the
-- administrator does), and gets on each table only what its strategy runs.
-- docs/SECURITY.md explains every line; e2e/grants_test.go runs
-- `idem serve` under exactly these grants.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idem_loader') THEN
        CREATE ROLE idem_loader LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
    END IF;
END $$;
\if :{?loader_password}
ALTER ROLE idem_loader PASSWORD :'loader_password';
\endif
-- Timeouts as role settings, never a plain SET on a pooled connection.
ALTER ROLE idem_loader SET idle_in_transaction_session_timeout = '10min';
ALTER ROLE idem_loader SET lock_timeout = '1min';
-- idem's session settings, for every route. Connected to PostgreSQL
-- itself, idem also sends them in its startup packet; behind a pooler
-- (PgBouncer refuses startup parameters it does not track) these lines are
-- their only home. Bookkeeping rows then commit without waiting for the WAL
-- flush; every load sets synchronous_commit back on (SET LOCAL), and its
-- flush covers the earlier rows. A cluster that needs remote_apply sets
-- that here instead of off: idem's loads follow the role's default.
-- jit off: idem's lookups are short index seeks that JIT only slows.
ALTER ROLE idem_loader SET synchronous_commit = off;
ALTER ROLE idem_loader SET jit = off;

-- Schema idem (audit, ledger, outbox, load sequence): read and write its
-- rows, never DELETE or TRUNCATE them, never change the schema.
GRANT USAGE ON SCHEMA idem TO idem_loader;
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA idem TO idem_loader;
REVOKE INSERT, UPDATE ON idem.schema_migrations FROM idem_loader;
REVOKE UPDATE ON idem.definitions FROM idem_loader;           -- recorded once, never changed
GRANT USAGE ON ALL SEQUENCES IN SCHEMA idem TO idem_loader;      -- nextval('idem.load_seq')
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA idem TO idem_loader;    -- PUBLIC has it unless revoked

-- Retention. idem_loader deletes nothing in schema idem itself: it prunes
-- the audit (with its check results, source files and source waits), the
-- sent outbox rows and the archived versions' records only through these
-- functions, which run as the role that ran `idem migrate`, keep what the
-- retention rules keep (each partition's latest attempt and latest
-- success, attempts an outbox row names, every ledger row, every unsent
-- outbox row) and delete nothing younger than idem.retention_floor, however
-- short an age idem_loader asks for. idem_loader reads the floor and
-- cannot change it; the administrator can:
--   UPDATE idem.retention_floor SET min_age = interval '30 days';
GRANT EXECUTE ON FUNCTION idem.prune_audit(interval, bigint, integer),
                          idem.prune_source_waits(interval),
                          idem.purge_outbox(interval, integer),
                          idem.prune_archived_versions(interval, text) TO idem_loader;
REVOKE INSERT, UPDATE ON idem.retention_floor FROM idem_loader;

-- keep_versions: a load copies the rows it replaces into a table of
-- schema idem_archive, which `idem migrate` creates; idem_loader creates
-- those tables, one per target, and so owns them. It deletes the records of
-- the versions a load lets go only through idem.trim_archived_versions,
-- which runs as the role that ran `idem migrate` and deletes only one
-- partition's versions beyond the newest the load keeps, never its newest.
GRANT USAGE, CREATE ON SCHEMA idem_archive TO idem_loader;
GRANT EXECUTE ON FUNCTION idem.trim_archived_versions(text, text, text, integer, bigint[]) TO idem_loader;

-- Sources: read only.
GRANT USAGE ON SCHEMA staging TO idem_loader;
GRANT SELECT ON staging.orders, staging.customers, staging.events TO idem_loader;

GRANT USAGE ON SCHEMA analytics TO idem_loader;

-- delete_insert (orders -> analytics.fact_orders): DELETE the partition's
-- rows (SELECT for its WHERE), INSERT the source's.
GRANT SELECT, INSERT, DELETE ON analytics.fact_orders TO idem_loader;
-- A day with a child of its own is deleted through the parent and inserted
-- straight into that child, which needs INSERT on the child itself: granted
-- here on every existing child; grant it on each new child where you create
-- it. A child without it makes its days fail with permission_denied. A
-- dataset with truncate_partition: true needs TRUNCATE on the child too.
DO $$
DECLARE child regclass;
BEGIN
    FOR child IN SELECT inhrelid::regclass FROM pg_inherits
                  WHERE inhparent = 'analytics.fact_orders'::regclass LOOP
        EXECUTE format('GRANT INSERT ON %s TO idem_loader', child);
    END LOOP;
END $$;

-- merge (customers -> analytics.dim_customers): INSERT ... ON CONFLICT DO
-- UPDATE, whose WHERE and RETURNING read the row.
GRANT SELECT, INSERT, UPDATE ON analytics.dim_customers TO idem_loader;

-- append_dedupe (events -> raw.events, view raw.latest_events): idem
-- creates the view, so CREATE on its schema; the view is then idem_loader's.
-- idem creates the target's <table>_idem_dedupe index when it is missing,
-- which needs ownership: either idem_loader owns the target (below), or an
-- administrator creates that index once and grants only SELECT, INSERT.
GRANT USAGE, CREATE ON SCHEMA raw TO idem_loader;
ALTER TABLE raw.events OWNER TO idem_loader;

-- on_schema_change append_new_columns or sync_all_columns: idem alters the
-- target inside the load's transaction (ADD COLUMN, or a widening ALTER
-- COLUMN TYPE), which only the table's owner may do. idem_loader is
-- NOINHERIT, so being a member of the owner's role is not enough: let it own
-- each target of a dataset on those policies (its other grants stay), e.g.
--   ALTER TABLE analytics.fact_orders OWNER TO idem_loader;
-- Without it, such a change is refused as fatal (schema_mismatch) with the
-- statement to run, and `idem validate` says so before the first load.
-- raw.events, owned above, may take them already.
