-- idem schema v17: the schema changes a load met (on_schema_change), each
-- beside the attempt that met it: which column, the target's and the
-- source's types, the policy and what the load did (added, widened,
-- ignored, kept, refused, found). A change idem made is written in the
-- load's transaction, with the DDL; a refused one after the rollback. Kept
-- for as long as the table exists: they are few, and the history of a
-- table's columns outlives the audit rows' retention.
CREATE TABLE idem.schema_changes (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    audit_id      bigint      NOT NULL,               -- the attempt (idem.pipeline_audit.id)
    dag_id        text        NOT NULL,
    task_id       text        NOT NULL,
    partition_key text        NOT NULL,
    run_id        text        NOT NULL,
    column_name   text        NOT NULL,
    change        text        NOT NULL CHECK (change IN ('new_column', 'retyped', 'missing_column')),
    action        text        NOT NULL CHECK (action IN ('added', 'widened', 'ignored', 'kept', 'refused', 'found')),
    old_type      text,
    new_type      text,
    policy        text        NOT NULL,
    ddl           text,
    reason        text,
    changed_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX schema_changes_partition ON idem.schema_changes (dag_id, task_id, partition_key, id DESC);
CREATE INDEX schema_changes_recent ON idem.schema_changes (dag_id, id DESC);
