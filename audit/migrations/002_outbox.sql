-- idem schema v2: the transactional outbox for downstream datasets (then:),
-- and lineage on the audit rows.

-- Events to publish, written in the same transaction as the load that caused
-- them: if the load commits, its downstream events exist; if it rolls back,
-- they never did. A relay in every `idem serve` publishes them.
CREATE TABLE idem.outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subject       text        NOT NULL,
    msg_id        text        NOT NULL,          -- Nats-Msg-Id: JetStream drops a re-publish inside its window
    body          bytea       NOT NULL,
    audit_id      bigint      NOT NULL REFERENCES idem.pipeline_audit (id), -- the upstream attempt
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    sent_at       timestamptz,
    stream_seq    bigint,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text
);
CREATE UNIQUE INDEX outbox_msg_id ON idem.outbox (msg_id);
CREATE INDEX outbox_pending ON idem.outbox (id) WHERE sent_at IS NULL;

-- Which upstream run triggered this attempt: "<dataset>:<partition>:<run_id>".
ALTER TABLE idem.pipeline_audit ADD COLUMN triggered_by text;
ALTER TABLE idem.pipeline_audit ADD COLUMN attributes jsonb;

CREATE OR REPLACE VIEW idem.partition_status AS
SELECT DISTINCT ON (dag_id, task_id, partition_key)
       dag_id, task_id, partition_key, logical_date, run_id, status, attempt,
       row_count, error, error_kind, stream_seq, started_at, finished_at, id AS audit_id,
       triggered_by
  FROM idem.pipeline_audit
 WHERE status <> 'skipped'
 ORDER BY dag_id, task_id, partition_key, id DESC;
