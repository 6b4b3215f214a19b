-- idem schema v11: every event's terminal outcome, published on the results
-- stream (idem publish --wait follows it). A load's result is a row of the
-- outbox written in the load's transaction, so a committed load always gets
-- its result and a rolled-back one never does; the relay publishes it to
-- <results prefix>.<dataset> with a Nats-Msg-Id of its own. result holds the
-- message's body (JSON); a row without one is a downstream event.
ALTER TABLE idem.outbox ADD COLUMN result jsonb;

DROP INDEX idem.outbox_event;
CREATE UNIQUE INDEX outbox_event ON idem.outbox (audit_id, dataset, partition_key, run_id) WHERE result IS NULL;
-- One result per attempt.
CREATE UNIQUE INDEX outbox_result ON idem.outbox (audit_id) WHERE result IS NOT NULL;
