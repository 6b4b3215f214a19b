-- idem schema v23: an operator may pause, resume and cancel, recorded like
-- the other actions; an attempt a cancel stopped is `cancelled`. Both
-- check constraints are replaced, not edited, so a database at v22
-- upgrades in place.
ALTER TABLE idem.operator_actions DROP CONSTRAINT operator_actions_action_check;
ALTER TABLE idem.operator_actions ADD CONSTRAINT operator_actions_action_check
    CHECK (action IN ('replay', 'backfill', 'reload', 'pause', 'resume', 'cancel'));
ALTER TABLE idem.pipeline_audit DROP CONSTRAINT pipeline_audit_status_check;
ALTER TABLE idem.pipeline_audit ADD CONSTRAINT pipeline_audit_status_check
    CHECK (status IN ('started', 'success', 'failed', 'skipped', 'cancelled'));
