-- idem schema v26: archived versions under least privilege. A load of a
-- dataset with keep_versions archives the rows it replaces into schema
-- idem_archive and keeps the newest versions of the partition; idem's role
-- may not create schemas, nor DELETE in schema idem
-- (deploy/postgres/grants.sql), so the schema is created here, by the role
-- that runs `idem migrate`, and the records of the versions a load lets go
-- are deleted through a function that runs as that role.

-- The schema of the archive tables. idem's role creates them in it and
-- owns them (grants.sql grants it USAGE and CREATE); a schema idem's role
-- created before this version is left as it is.
CREATE SCHEMA IF NOT EXISTS idem_archive;

-- The versions of one partition (dag, task, part) beyond its newest
-- greatest(keep, 1), not counting those of spare, which stay: deletes
-- their rows of idem.archived_versions and returns their ids, for the
-- caller to delete the archived rows, which live in a table of its own.
-- spare holds the version a load has just saved and, for a restore, the
-- version it puts back; only those of the partition count. Whatever its
-- caller asks, it deletes nothing of another partition and never the
-- partition's newest version.
CREATE FUNCTION idem.trim_archived_versions(dag text, task text, part text, keep integer, spare bigint[])
    RETURNS SETOF bigint
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
WITH mine AS (
     SELECT v.id, v.id = ANY (coalesce(spare, '{}')) AS spared
       FROM idem.archived_versions v
      WHERE v.dag_id = dag AND v.task_id = task AND v.partition_key = part),
doomed AS (
     SELECT id FROM mine WHERE NOT spared
      ORDER BY id DESC
     OFFSET greatest(greatest(keep, 1) - (SELECT count(*) FROM mine WHERE spared), 0))
DELETE FROM idem.archived_versions
 WHERE id IN (SELECT id FROM doomed) AND id < (SELECT max(id) FROM mine)
RETURNING id
$$;

REVOKE EXECUTE ON FUNCTION idem.trim_archived_versions(text, text, text, integer, bigint[]) FROM PUBLIC;
