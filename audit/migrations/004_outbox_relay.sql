-- idem schema v4: the outbox stores what a downstream event is, never how it
-- travels (the relay derives the subject, the body and the Nats-Msg-Id from
-- package schemas, with the subject prefix of its config), and each row
-- schedules its own retries, so a row that keeps failing never holds back
-- the rows behind it.

ALTER TABLE idem.outbox
    ADD COLUMN dataset         text,
    ADD COLUMN partition_key   text,
    ADD COLUMN run_id          text,
    ADD COLUMN force           boolean NOT NULL DEFAULT false,
    ADD COLUMN attributes      jsonb,                  -- incl. triggered_by, the lineage
    -- The row is due from then on: a failed publish moves it back.
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- A relay's claim: other relays leave the row alone until then, without
    -- any transaction held while it publishes.
    ADD COLUMN claimed_until   timestamptz;

-- Rows written by an older idem carry the event as their body. Their message
-- id is derived again at publish time; one written before message ids named
-- the upstream attempt gets a new id, and a re-publish of it is skipped by
-- the run ledger instead of JetStream's duplicate window.
UPDATE idem.outbox o
   SET dataset = b.e ->> 'dataset', partition_key = b.e ->> 'partition', run_id = b.e ->> 'run_id',
       force = coalesce((b.e ->> 'force')::boolean, false), attributes = b.e -> 'attributes',
       next_attempt_at = o.created_at
  FROM (SELECT id, convert_from(body, 'UTF8')::jsonb AS e FROM idem.outbox) b
 WHERE b.id = o.id;

DROP INDEX idem.outbox_pending;
ALTER TABLE idem.outbox
    ALTER COLUMN dataset SET NOT NULL,
    ALTER COLUMN partition_key SET NOT NULL,
    ALTER COLUMN run_id SET NOT NULL,
    DROP COLUMN subject,
    DROP COLUMN body,
    DROP COLUMN msg_id;   -- and its unique index

-- One row per message id: the id is "<dataset>:<partition>:<run_id>:<audit_id>".
CREATE UNIQUE INDEX outbox_event ON idem.outbox (audit_id, dataset, partition_key, run_id);
-- The relay's claim, oldest due first.
CREATE INDEX outbox_due ON idem.outbox (next_attempt_at, id) WHERE sent_at IS NULL;
-- Retention: sent rows are deleted once older than the relay's retention.
CREATE INDEX outbox_sent ON idem.outbox (sent_at) WHERE sent_at IS NOT NULL;
