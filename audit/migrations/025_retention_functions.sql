-- idem schema v25: retention under least privilege. idem's role may not
-- DELETE in schema idem (deploy/postgres/grants.sql), so it prunes through
-- these functions. Each runs as its owner, the role that ran `idem
-- migrate` (SECURITY DEFINER, with a fixed search_path), deletes only what
-- the retention rules let go, and never anything younger than
-- idem.retention_floor, whatever age its caller asks for. PUBLIC may not
-- run them; grants.sql grants them to idem's role.

-- The shortest age a prune or a purge deletes: one row, which only the
-- owner may change (grants.sql lets idem's role read it), e.g.
--   UPDATE idem.retention_floor SET min_age = interval '30 days';
-- The default is the shortest audit.retention the config accepts.
CREATE TABLE idem.retention_floor (
    one     boolean  PRIMARY KEY DEFAULT true CHECK (one),
    min_age interval NOT NULL DEFAULT interval '7 days' CHECK (min_age >= interval '0')
);
INSERT INTO idem.retention_floor DEFAULT VALUES;

-- The moment before which rows may go: now, less the age asked for or the
-- floor, whichever is longer. No floor row, no pruning.
CREATE FUNCTION idem.retention_cutoff(older_than interval) RETURNS timestamptz
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    floor_age interval;
BEGIN
    SELECT f.min_age INTO floor_age FROM idem.retention_floor f;
    IF floor_age IS NULL THEN
        RAISE EXCEPTION 'idem.retention_floor holds no row: nothing is pruned until it does'
            USING ERRCODE = '55000', HINT = 'INSERT INTO idem.retention_floor DEFAULT VALUES';
    END IF;
    RETURN now() - greatest(older_than, floor_age);
END
$$;

-- One batch of the audit's retention: examines the next batch_size
-- attempts after id after_id and deletes those started before the cutoff
-- that are not kept, with their check results and source files, counting
-- them per partition in idem.pruned_attempts. Kept: each partition's
-- latest attempt that is not a skipped duplicate, unless a newer one
-- finished (a newer started attempt may yet be skipped); its latest
-- success; attempts an outbox row names; rows a transaction holds
-- (skipped). The ledger is never touched. Returns the last id examined,
-- the attempts deleted, and whether the walk reached the cutoff (or the
-- end of the table): ids grow with started_at, so the first attempt
-- inside the window ends it.
CREATE FUNCTION idem.prune_audit(older_than interval, after_id bigint, batch_size integer,
                                 OUT last_id bigint, OUT deleted bigint, OUT done boolean)
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
WITH cutoff AS (
     SELECT idem.retention_cutoff(older_than) AS t),
batch AS (
     SELECT id, started_at FROM idem.pipeline_audit WHERE id > after_id ORDER BY id LIMIT batch_size),
doomed AS (
     SELECT a.id FROM idem.pipeline_audit a JOIN batch b ON b.id = a.id
      WHERE a.started_at < (SELECT t FROM cutoff)
        AND NOT EXISTS (SELECT 1 FROM idem.outbox o WHERE o.audit_id = a.id)
        AND (a.status = 'skipped' OR EXISTS (
             SELECT 1 FROM idem.pipeline_audit n
              WHERE n.dag_id = a.dag_id AND n.task_id = a.task_id AND n.partition_key = a.partition_key
                AND n.id > a.id
                AND (n.status = 'success' OR (n.status = 'failed' AND a.status <> 'success'))))
        FOR UPDATE OF a SKIP LOCKED),
del AS (
     DELETE FROM idem.pipeline_audit a USING doomed d WHERE a.id = d.id
     RETURNING a.dag_id, a.task_id, a.partition_key, a.logical_date, a.status),
checks AS (
     DELETE FROM idem.check_results c USING doomed d WHERE c.audit_id = d.id),
files AS (
     DELETE FROM idem.source_files f USING doomed d WHERE f.audit_id = d.id),
counted AS (
     INSERT INTO idem.pruned_attempts AS p (dag_id, task_id, partition_key, logical_date, attempts, skipped)
     SELECT dag_id, task_id, partition_key, max(logical_date),
            count(*) FILTER (WHERE status <> 'skipped'), count(*) FILTER (WHERE status = 'skipped')
       FROM del GROUP BY dag_id, task_id, partition_key
     ON CONFLICT (dag_id, task_id, partition_key) DO UPDATE
        SET attempts = p.attempts + EXCLUDED.attempts, skipped = p.skipped + EXCLUDED.skipped)
SELECT (SELECT max(id) FROM batch),
       (SELECT count(*) FROM del),
       (SELECT count(*) < batch_size OR bool_or(started_at >= (SELECT t FROM cutoff)) FROM batch)
$$;

-- Source waits last checked before the cutoff: over one way or the other
-- (loaded, dead-lettered, or their event is gone). Returns how many went.
CREATE FUNCTION idem.prune_source_waits(older_than interval) RETURNS bigint
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
WITH gone AS (
     DELETE FROM idem.source_waits WHERE checked_at < idem.retention_cutoff(older_than) RETURNING 1)
SELECT count(*) FROM gone
$$;

-- Up to max_rows outbox rows sent before the cutoff; a row not sent is
-- never deleted, however old. Returns how many went.
CREATE FUNCTION idem.purge_outbox(older_than interval, max_rows integer) RETURNS bigint
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
WITH gone AS (
     DELETE FROM idem.outbox WHERE id IN (
            SELECT id FROM idem.outbox
             WHERE sent_at < idem.retention_cutoff(older_than)
             LIMIT max_rows
               FOR UPDATE SKIP LOCKED)
     RETURNING 1)
SELECT count(*) FROM gone
$$;

-- The archived versions in archive table archive (its name in schema
-- idem_archive) archived before the cutoff: deletes their rows of
-- idem.archived_versions and returns their ids, for the caller to delete
-- the archived rows, which live in a table of its own.
CREATE FUNCTION idem.prune_archived_versions(older_than interval, archive text) RETURNS SETOF bigint
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DELETE FROM idem.archived_versions
 WHERE archive_table = archive AND archived_at < idem.retention_cutoff(older_than)
RETURNING id
$$;

REVOKE EXECUTE ON FUNCTION idem.prune_audit(interval, bigint, integer),
                           idem.prune_source_waits(interval),
                           idem.purge_outbox(interval, integer),
                           idem.prune_archived_versions(interval, text)
    FROM PUBLIC;
