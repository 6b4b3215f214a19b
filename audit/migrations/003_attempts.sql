-- idem schema v3: a message's retry budget counts loads that ran, read from
-- this table, not JetStream deliveries. Two new error kinds mark attempts that
-- do not count against it:
--   unavailable  the warehouse went away under the load (admin shutdown, a
--                failover to a read-only server, ...): the environment
--                failed, not the event;
--   interrupted  idem itself stopped the load (a shutdown's grace ran out).
ALTER TABLE idem.pipeline_audit DROP CONSTRAINT pipeline_audit_error_kind_check;
ALTER TABLE idem.pipeline_audit ADD CONSTRAINT pipeline_audit_error_kind_check
    CHECK (error_kind IN ('fatal', 'transient', 'unavailable', 'interrupted'));
