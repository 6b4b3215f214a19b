-- idem schema v8: idem.missing_partitions reads the ledger.
--
-- Since v7 the function found a day's successes by reading every attempt
-- of its range through pipeline_audit_date_idx and checking each row's
-- status in the table: its cost followed the attempts kept per day and how
-- far apart their pages lie, which grows with the history (1.25x from 100k
-- to 10M attempts). The ledger holds one row per successful run, is never
-- pruned, and its primary key (dag_id, task_id, partition_key, run_id)
-- answers "any success of this day?" with one index-only seek: the same
-- lookup the calendar's LoadedPartitions makes.
--
-- A success is written to the audit and the ledger by one statement, and
-- retention keeps each partition's latest success in the audit, so the
-- answer is the same as before. A day's partitions are its canonical keys:
-- the date itself (date partitions) and the hours of that day
-- (timestamp partitions, YYYY-MM-DDTHH:00:00Z). Text partitions have no
-- day; as before, they never count as a day's load.
--
-- Each day is one seek, whatever the planner estimates: the lookup is a
-- LATERAL subquery with LIMIT 1, which cannot be flattened into a join. As
-- a plain NOT EXISTS, the planner could not estimate the key range it
-- computes from the day, and on 4M ledger rows it read every success of
-- the dataset once and filtered it per day (50 ms for a month, against
-- 0.2 ms for one seek per day). The days come from an integer series,
-- whose length the planner knows when the function is called with
-- constants.
CREATE OR REPLACE FUNCTION idem.missing_partitions(p_dag_id text, p_task_id text, p_from date, p_to date)
RETURNS TABLE (logical_date date)
LANGUAGE sql STABLE AS $$
    SELECT days.d
      FROM (SELECT p_from + i AS d FROM generate_series(0, p_to - p_from) AS i) AS days
      LEFT JOIN LATERAL (
           SELECT l.partition_key FROM idem.run_ledger l
            WHERE l.dag_id = p_dag_id AND l.task_id = p_task_id
              AND l.partition_key >= to_char(days.d, 'YYYY-MM-DD')
              AND l.partition_key < to_char(days.d, 'YYYY-MM-DD') || 'U'
              AND (l.partition_key = to_char(days.d, 'YYYY-MM-DD')
                   OR l.partition_key LIKE to_char(days.d, 'YYYY-MM-DD') || 'T__:00:00Z')
            ORDER BY l.partition_key
            LIMIT 1) AS hit ON true
     WHERE hit.partition_key IS NULL
     ORDER BY 1
$$;
