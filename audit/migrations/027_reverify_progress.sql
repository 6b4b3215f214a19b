-- idem schema v27: how far a re-verification pass got, kept in the
-- warehouse it verifies. Every event of the pass's window up to
-- through_seq of stream has its verdict on the server named by
-- system_identifier and timeline. Replicas are killed, a lease holder
-- among them: the replica that takes the lease next resumes the pass
-- after through_seq instead of reading and loading the window again. A
-- server with another identity (the next failover) starts over. The row
-- is written after the loads it counts, so the WAL that holds it holds
-- them too.
CREATE TABLE idem.reverify_progress (
    dag_id            text        PRIMARY KEY,
    system_identifier text        NOT NULL,
    timeline          integer     NOT NULL,
    stream            text        NOT NULL,
    through_seq       bigint      NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
