-- Checks (checks: in the config): an attempt the checks refused is failed
-- with error_kind 'check'; every check's outcome of every attempt, passing
-- or not, is kept in idem.check_results, written after the load's
-- transaction ended (a refused load's outcomes survive its rollback).
ALTER TABLE idem.pipeline_audit DROP CONSTRAINT pipeline_audit_error_kind_check;
ALTER TABLE idem.pipeline_audit ADD CONSTRAINT pipeline_audit_error_kind_check
    CHECK (error_kind IN ('fatal', 'transient', 'unavailable', 'interrupted', 'check'));

CREATE TABLE idem.check_results (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    audit_id      bigint      NOT NULL,               -- the attempt (idem.pipeline_audit.id)
    dag_id        text        NOT NULL,
    task_id       text        NOT NULL,
    partition_key text        NOT NULL,
    run_id        text        NOT NULL,
    name          text        NOT NULL,
    kind          text        NOT NULL,
    severity      text        NOT NULL CHECK (severity IN ('error', 'warn')),
    status        text        NOT NULL CHECK (status IN ('pass', 'fail', 'warn', 'skipped')),
    failing       bigint      NOT NULL,
    checked       bigint      NOT NULL,
    threshold     text        NOT NULL,
    samples       jsonb,
    note          text,
    duration_ms   double precision NOT NULL,
    checked_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX check_results_attempt ON idem.check_results (audit_id);
CREATE INDEX check_results_partition ON idem.check_results (dag_id, task_id, partition_key, id DESC);
