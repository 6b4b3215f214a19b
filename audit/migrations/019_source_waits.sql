-- idem schema v19: partitions whose source is not ready yet (a files
-- source's ready rule, a standby's lag). A waiting event runs no attempt,
-- so without this row the page, `idem audit why` and the API would show
-- nothing while it waits. One row per partition, rewritten at each check:
-- the run waiting, why, since when (the event's publication), the last
-- check, when the wait gives up, and whether it did. A row is current only
-- while no attempt of the partition started after its last check.
CREATE TABLE idem.source_waits (
    dag_id        text        NOT NULL,
    task_id       text        NOT NULL,
    partition_key text        NOT NULL,
    run_id        text        NOT NULL,
    reason        text        NOT NULL,
    since         timestamptz NOT NULL,
    checked_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    gives_up_at   timestamptz NOT NULL,
    checks        integer     NOT NULL DEFAULT 1,
    gave_up       boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (dag_id, task_id, partition_key)
);
CREATE INDEX source_waits_checked ON idem.source_waits (checked_at);
