-- idem schema v6: the audit keeps a bounded history. `idem serve` deletes
-- attempts older than the config's audit.retention (audit.Prune), except
-- what the readers of the audit need forever: each partition's latest
-- attempt (skips aside) and its latest success. The ledger is never pruned.

-- The ledger names the attempt that recorded each success. That attempt may
-- be pruned once a newer success of the partition exists, so audit_id is a
-- plain reference, no longer a foreign key. (The foreign key also made every
-- delete from pipeline_audit scan the whole ledger: audit_id has no index.)
ALTER TABLE idem.run_ledger DROP CONSTRAINT IF EXISTS run_ledger_audit_id_fkey;

-- What pruning removed, per partition: `idem audit status` adds these
-- counts to the attempts still stored, so its answers do not change when
-- history is pruned. Written only by the pruner.
CREATE TABLE idem.pruned_attempts (
    dag_id        text   NOT NULL,
    task_id       text   NOT NULL,
    partition_key text   NOT NULL,
    logical_date  date,
    attempts      bigint NOT NULL DEFAULT 0,   -- started, success or failed attempts deleted
    skipped       bigint NOT NULL DEFAULT 0,   -- skipped duplicates deleted
    PRIMARY KEY (dag_id, task_id, partition_key)
);

-- The same answer as before, but the successes are read for the range only:
-- without the bound the planner's anti join read every success of the
-- dataset, so the cost grew with the history.
CREATE OR REPLACE FUNCTION idem.missing_partitions(p_dag_id text, p_task_id text, p_from date, p_to date)
RETURNS TABLE (logical_date date)
LANGUAGE sql STABLE AS $$
    SELECT d::date
      FROM generate_series(p_from, p_to, interval '1 day') AS d
     WHERE NOT EXISTS (
           SELECT 1 FROM idem.pipeline_audit a
            WHERE a.dag_id = p_dag_id AND a.task_id = p_task_id
              AND a.logical_date BETWEEN p_from AND p_to
              AND a.logical_date = d::date AND a.status = 'success')
     ORDER BY 1
$$;
