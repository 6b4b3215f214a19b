-- idem schema v1: the audit log of every attempt, the success ledger, the load
-- sequence for append_dedupe, and the helpers strategies call inside a load.

CREATE TABLE idem.pipeline_audit (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dag_id        text        NOT NULL,               -- the config's pipeline
    task_id       text        NOT NULL,               -- the dataset
    logical_date  date,                               -- the partition's date; NULL for text partitions
    partition_key text        NOT NULL,               -- the partition as the event named it (canonical form)
    run_id        text        NOT NULL,
    status        text        NOT NULL CHECK (status IN ('started', 'success', 'failed', 'skipped')),
    attempt       integer     NOT NULL CHECK (attempt >= 1),
    force         boolean     NOT NULL DEFAULT false,
    row_count     bigint,                             -- rows written: inserted + updated
    rows_inserted bigint,
    rows_updated  bigint,
    rows_deleted  bigint,
    error         text,
    error_kind    text CHECK (error_kind IN ('fatal', 'transient')),
    stream_seq    bigint,                             -- JetStream sequence of the event, when it came from one
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at   timestamptz,
    CHECK ((status = 'started') = (finished_at IS NULL))
);

CREATE INDEX pipeline_audit_partition_idx
    ON idem.pipeline_audit (dag_id, task_id, partition_key, id DESC);
CREATE INDEX pipeline_audit_date_idx
    ON idem.pipeline_audit (dag_id, task_id, logical_date) WHERE status = 'success';

-- The ledger: at most one success per (pipeline, dataset, partition, run_id),
-- enforced by the primary key. A load records its success here in the same
-- transaction as its rows, so "committed" and "recorded" cannot disagree.
CREATE TABLE idem.run_ledger (
    dag_id        text        NOT NULL,
    task_id       text        NOT NULL,
    partition_key text        NOT NULL,
    run_id        text        NOT NULL,
    audit_id      bigint      NOT NULL REFERENCES idem.pipeline_audit (id),
    loads         integer     NOT NULL DEFAULT 1,     -- > 1 when forced reruns replaced it
    succeeded_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (dag_id, task_id, partition_key, run_id)
);

-- Latest status per partition. Skipped duplicates say nothing new about a
-- partition, so they are left out.
CREATE VIEW idem.partition_status AS
SELECT DISTINCT ON (dag_id, task_id, partition_key)
       dag_id, task_id, partition_key, logical_date, run_id, status, attempt,
       row_count, error, error_kind, stream_seq, started_at, finished_at, id AS audit_id
  FROM idem.pipeline_audit
 WHERE status <> 'skipped'
 ORDER BY dag_id, task_id, partition_key, id DESC;

-- Partitions with no successful load between two dates, inclusive:
--   SELECT * FROM idem.missing_partitions('shop', 'orders', '2026-11-01', '2026-11-28');
CREATE FUNCTION idem.missing_partitions(p_dag_id text, p_task_id text, p_from date, p_to date)
RETURNS TABLE (logical_date date)
LANGUAGE sql STABLE AS $$
    SELECT d::date
      FROM generate_series(p_from, p_to, interval '1 day') AS d
     WHERE NOT EXISTS (
           SELECT 1 FROM idem.pipeline_audit a
            WHERE a.dag_id = p_dag_id AND a.task_id = p_task_id
              AND a.logical_date = d::date AND a.status = 'success')
     ORDER BY 1
$$;

-- append_dedupe: one value per load, so the dedupe view can order loads
-- without trusting run_id text to sort by time.
CREATE SEQUENCE idem.load_seq AS bigint;

-- Raised by delete_insert when the source returns a row outside the partition
-- being loaded: such a row would be doubled by the next rerun.
CREATE FUNCTION idem.outside_partition(got anyelement, want text)
RETURNS anyelement
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'source returned a row for partition % while loading partition %', got, want
        USING ERRCODE = '22023',
              HINT = 'filter the source with @partition so it returns only the partition being loaded';
END
$$;
