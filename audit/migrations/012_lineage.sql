-- idem schema v12: OpenLineage run events (lineage: in the config) travel
-- through the outbox like results: an attempt's START and COMPLETE are rows
-- written in its load's transaction, its START and FAIL in the statement
-- that records its failure, so a rolled-back load never emits COMPLETE and
-- a receiver that is down gets every event later. lineage holds the event
-- (JSON); one row per attempt and event type.
ALTER TABLE idem.outbox ADD COLUMN lineage jsonb;

DROP INDEX idem.outbox_event;
CREATE UNIQUE INDEX outbox_event ON idem.outbox (audit_id, dataset, partition_key, run_id) WHERE result IS NULL AND lineage IS NULL;
CREATE UNIQUE INDEX outbox_lineage ON idem.outbox (audit_id, (lineage ->> 'eventType')) WHERE lineage IS NOT NULL;
