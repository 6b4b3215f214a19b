-- idem schema v23: two operator controls. A dataset may be paused (its
-- events are held, nothing is attempted) until an operator resumes it or
-- its until passes; a backfill may be cancelled (its events not yet loaded
-- are recorded `cancelled` and acknowledged). Every pause, resume and
-- cancel is an operator action too. Constraints are replaced, not edited
-- in 001 and 016, so a database at v22 upgrades in place.

-- One row per pause, kept after it ends so a partition's story can tell
-- it. A pause is in force while resumed_at IS NULL and until has not
-- passed: an expired pause needs no writer to end.
CREATE TABLE idem.dataset_pauses (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dag_id        text        NOT NULL,
    task_id       text        NOT NULL,
    paused_by     text        NOT NULL,
    reason        text        NOT NULL CHECK (reason <> ''),
    since         timestamptz NOT NULL DEFAULT clock_timestamp(),
    until         timestamptz,                       -- NULL: until resumed
    resumed_at    timestamptz,
    resumed_by    text,
    resume_reason text,
    CHECK (until IS NULL OR until > since),
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL))
);
CREATE INDEX dataset_pauses_by_dataset ON idem.dataset_pauses (dag_id, task_id, id DESC);
-- At most one pause open per dataset; a new pause closes the open one.
CREATE UNIQUE INDEX dataset_pauses_open ON idem.dataset_pauses (dag_id, task_id) WHERE resumed_at IS NULL;

-- A cancelled backfill: by run id (every event of the run, downstream
-- ones included), or by dataset and partition range (the events of those
-- partitions published before the cancellation).
CREATE TABLE idem.cancellations (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dag_id       text        NOT NULL,
    run_id       text,
    task_id      text,
    from_key     text,
    to_key       text,
    cancelled_by text        NOT NULL,
    reason       text        NOT NULL CHECK (reason <> ''),
    cancelled_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((run_id IS NOT NULL) <> (task_id IS NOT NULL AND from_key IS NOT NULL AND to_key IS NOT NULL))
);
CREATE INDEX cancellations_run ON idem.cancellations (dag_id, run_id) WHERE run_id IS NOT NULL;
CREATE INDEX cancellations_range ON idem.cancellations (dag_id, task_id) WHERE run_id IS NULL;

ALTER TABLE idem.operator_actions DROP CONSTRAINT operator_actions_action_check;
ALTER TABLE idem.operator_actions ADD CONSTRAINT operator_actions_action_check
    CHECK (action IN ('replay', 'backfill', 'reload', 'pause', 'resume', 'cancel'));

ALTER TABLE idem.pipeline_audit DROP CONSTRAINT pipeline_audit_status_check;
ALTER TABLE idem.pipeline_audit ADD CONSTRAINT pipeline_audit_status_check
    CHECK (status IN ('started', 'success', 'failed', 'skipped', 'cancelled'));
