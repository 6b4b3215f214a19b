-- idem schema v14: a token of every outbox row's own, part of the
-- Nats-Msg-Id of what the relay publishes from it. An audit id alone does
-- not name one attempt for ever: a failover to a standby that lacks the
-- last commits loses the audit sequence's last values with them, and the
-- next attempts are given those ids again. Their results and downstream
-- events then carried the message id of one a lost attempt had already
-- published, and JetStream dropped them as duplicates. A relay publishing
-- the same row twice still sends the same id. Rows written before this
-- version keep no token, and the ids they were published with.
ALTER TABLE idem.outbox ADD COLUMN token uuid;
ALTER TABLE idem.outbox ALTER COLUMN token SET DEFAULT gen_random_uuid();
