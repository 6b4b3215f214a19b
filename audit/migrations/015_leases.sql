-- idem schema v15: leases, so that one replica at a time runs a pass of
-- many transactions (audit pruning, a pipeline's re-verification) without
-- any session state. A session advisory lock outlives the transaction that
-- took it, and behind a transaction pooler (PgBouncer pool_mode =
-- transaction) the next transaction of the same client may run on another
-- server connection: the lock stays on a backend that no longer belongs to
-- it. A lease is a row instead, taken, renewed and given back by single
-- statements (audit.TryLease).
--
-- A lease is held while expires_at is in the future, by the database clock
-- (one clock for every replica). A holder that dies stops renewing it, and
-- it expires; one that finishes sets expires_at to the moment it gave it
-- back. holder is a random token per acquisition, so a holder whose lease
-- expired and was taken over can neither renew nor give back the new one.
-- Rows are never deleted (idem_loader has no DELETE on schema idem): there
-- is one per name.
CREATE TABLE idem.leases (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
