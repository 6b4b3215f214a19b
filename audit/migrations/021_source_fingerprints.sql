-- idem schema v21: a fingerprint of each partition's source, for recheck:
-- (reload the recent partitions whose source changed). One row per
-- partition, rewritten by each success in its transaction: the hash, the
-- values it summarises (for people: "count 1204 -> 1377"), the success it
-- describes. A recheck pass stamps its check on the row; where the
-- fingerprint moved it records what it published (the reload's run, when,
-- the values before and after), which the reload's success keeps.
CREATE TABLE idem.source_fingerprints (
    dag_id        text        NOT NULL,
    task_id       text        NOT NULL,
    partition_key text        NOT NULL,
    audit_id      bigint      NOT NULL,
    fingerprint   text        NOT NULL,
    fp_values     jsonb       NOT NULL,
    taken_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    checked_at    timestamptz,
    checks        bigint      NOT NULL DEFAULT 0,
    moved_run_id  text,
    moved_at      timestamptz,
    moved_from    jsonb,
    moved_to      jsonb,
    PRIMARY KEY (dag_id, task_id, partition_key)
);
