-- idem schema v5: what operators asked for through the status page (a dead
-- letter replayed, a backfill published), and who asked. The page writes a
-- row before it acts and records the outcome after.

CREATE TABLE idem.operator_actions (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dag_id       text        NOT NULL,
    action       text        NOT NULL CHECK (action IN ('replay', 'backfill')),
    requested_by text        NOT NULL,            -- the name the operator gave
    remote_addr  text,                            -- where the request came from
    detail       jsonb       NOT NULL,            -- what was asked: seq, or dataset and range
    outcome      text,                            -- what happened; NULL until done
    requested_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at  timestamptz
);
CREATE INDEX operator_actions_recent ON idem.operator_actions (dag_id, id DESC);
