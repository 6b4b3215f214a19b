package audit

// The advisory locks idem takes are named by a key text, joined with the
// unit separator (\x1f) so no dataset or partition can forge another's key.
// The server turns the text into the lock's bigint (lockIDSQL): stable
// across processes and versions, and the one expression LatestAttempts
// uses to recognise a held lock in pg_locks.

// lockIDSQL is the bigint of the advisory lock whose key text is the column
// lock_key.
const lockIDSQL = "hashtextextended(lock_key, 0)"

// LockSQL takes, until the caller's transaction ends, the advisory lock
// whose key text is $1: PartitionLockKey around a load, joinLockKey before
// a join's readiness check.
const LockSQL = "SELECT pg_advisory_xact_lock(" + lockIDSQL + ") FROM (SELECT $1::text AS lock_key) k"

// PartitionLockKey is the key text of the lock a load holds on its
// partition: loads of one partition run one at a time, and a `started`
// attempt whose lock is held is alive.
func PartitionLockKey(pipeline, dataset, partition string) string {
	return pipeline + "\x1f" + dataset + "\x1f" + partition
}
