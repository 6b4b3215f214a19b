-- Placeholder for schema v21, which another branch adds: delete this file
-- when that branch's 021 migration is merged.
SELECT 1;
