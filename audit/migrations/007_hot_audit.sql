-- idem schema v7: a load's audit success can be a HOT update.
--
-- The success UPDATE sets status, the counts and finished_at of the row the
-- attempt inserted moments before. status was in the predicate of
-- pipeline_audit_date_idx (WHERE status = 'success'), and a column an index
-- uses, even in its predicate, forbids a HOT update: each success wrote a
-- new entry in every index of the table. Without status in any index, and
-- with room left on each page for the update, the new row version stays on
-- its page and no index changes.
--
-- idem.missing_partitions keeps its seek: the index still leads with
-- (dag_id, task_id, logical_date), so it reads the attempts of its range
-- (a handful per day, bounded by retries and retention) and keeps the
-- successes, instead of reading the successes alone.
--
-- The index is built while the migration holds its lock: on a large audit
-- table, writes to it wait for the build (seconds per ten million rows).
ALTER TABLE idem.pipeline_audit SET (fillfactor = 90);
DROP INDEX idem.pipeline_audit_date_idx;
CREATE INDEX pipeline_audit_date_idx ON idem.pipeline_audit (dag_id, task_id, logical_date);
