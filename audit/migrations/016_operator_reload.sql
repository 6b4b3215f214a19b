-- idem schema v16: an operator may reload a partition from the status page
-- (a forced run of it), recorded like a replay or a backfill. The column's
-- check constraint is replaced, not edited in 005, so a database at v15
-- upgrades in place. An older binary never writes 'reload'.
ALTER TABLE idem.operator_actions DROP CONSTRAINT operator_actions_action_check;
ALTER TABLE idem.operator_actions ADD CONSTRAINT operator_actions_action_check
    CHECK (action IN ('replay', 'backfill', 'reload'));
