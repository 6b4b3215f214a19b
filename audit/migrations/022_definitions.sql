-- idem schema v22: the definition each attempt ran. definition_hash is the
-- hash of the dataset's source, strategy, key, checks and on_schema_change
-- when the attempt ran (NULL: before idem recorded it); a nullable column
-- without a default, so adding it rewrites nothing. idem.definitions keeps
-- each definition a replica ran, once, so that what changed since a
-- partition's load can still be said after the config moved on.
ALTER TABLE idem.pipeline_audit ADD COLUMN definition_hash text;

CREATE TABLE idem.definitions (
    dag_id     text        NOT NULL,
    task_id    text        NOT NULL,
    hash       text        NOT NULL,
    definition jsonb       NOT NULL,               -- the fields as the config names them
    first_seen timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (dag_id, task_id, hash)
);
