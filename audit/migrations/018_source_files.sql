-- idem schema v18: the files a load read (source: files:), one row per file
-- per attempt, written in the load's transaction: what was read (url, size,
-- the store's ETag and version id, or a local file's mtime and SHA-256) and
-- how many rows came from it. The listing's fingerprint, which names the
-- whole set, is the same on every row of an attempt. Pruned with the
-- attempts they belong to.
CREATE TABLE idem.source_files (
    audit_id      bigint      NOT NULL,               -- the attempt (idem.pipeline_audit.id)
    ordinal       integer     NOT NULL,               -- the file's place in the sorted listing
    dag_id        text        NOT NULL,
    task_id       text        NOT NULL,
    partition_key text        NOT NULL,
    url           text        NOT NULL,
    size_bytes    bigint      NOT NULL,
    etag          text,
    version_id    text,
    modified_at   timestamptz,
    sha256        text,
    rows_read     bigint      NOT NULL,
    fingerprint   text        NOT NULL,
    PRIMARY KEY (audit_id, ordinal)
);
CREATE INDEX source_files_partition ON idem.source_files (dag_id, task_id, partition_key, audit_id DESC);
