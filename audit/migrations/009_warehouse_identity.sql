-- The warehouse each pipeline last verified its loads against: PostgreSQL's
-- system identifier and timeline. A promoted standby carries this row as the
-- old primary left it, with the old timeline, so idem started against it
-- knows it must check its recent loads again (idem serve's re-verification).
CREATE TABLE idem.warehouse_identity (
    dag_id            text        PRIMARY KEY,
    system_identifier text        NOT NULL,
    timeline          integer     NOT NULL,
    verified_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
