-- idem schema v24: restore and retract a partition.
--
-- kind says what a success row did besides a load (NULL): 'restored' (an
-- operator swapped an archived version back in) or 'retracted' (an
-- operator emptied the partition on purpose). A nullable column without a
-- default: adding it rewrites nothing.
ALTER TABLE idem.pipeline_audit ADD COLUMN kind text
    CHECK (kind IN ('restored', 'retracted'));

ALTER TABLE idem.operator_actions DROP CONSTRAINT operator_actions_action_check;
ALTER TABLE idem.operator_actions ADD CONSTRAINT operator_actions_action_check
    CHECK (action IN ('replay', 'backfill', 'reload', 'pause', 'resume', 'cancel', 'restore', 'retract'));

-- One row per archived version of a partition (keep_versions): the rows
-- of run_id, as they stood before a load or a restore replaced them, are
-- in the table archive_table of schema idem_archive, under version id.
-- columns is the target's column list (name type, ...) when they were
-- archived: a restore is refused once the target's differs.
CREATE TABLE idem.archived_versions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dag_id        text        NOT NULL,
    task_id       text        NOT NULL,
    partition_key text        NOT NULL,
    run_id        text        NOT NULL,     -- the run that wrote the rows
    archive_table text        NOT NULL,     -- its name in schema idem_archive
    columns       text        NOT NULL,
    row_count     bigint      NOT NULL,
    archived_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX archived_versions_partition_idx
    ON idem.archived_versions (dag_id, task_id, partition_key, id DESC);
CREATE INDEX archived_versions_age_idx ON idem.archived_versions (archived_at);
