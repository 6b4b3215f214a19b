package audit

import "github.com/jackc/pgx/v5"

// joinLockKey is the advisory lock a join's upstreams take, in their load's
// transaction, before they look at each other: two upstreams committing at
// the same moment then see each other's commit one after the other, so the
// join is triggered at least once, never zero times.
func joinLockKey(pipeline, downstream, partition string) string {
	return "join\x1f" + pipeline + "\x1f" + downstream + "\x1f" + partition
}

// joinReadySQL: every other upstream's latest attempt for the partition
// (skips aside: they say nothing new) is a success. An upstream that never
// ran, whose latest attempt failed, or that is running now, is not ready;
// the one running will look again when it commits.
const joinReadySQL = `
SELECT NOT EXISTS (
       SELECT 1 FROM unnest($3::text[]) AS u(task_id)
        WHERE (SELECT a.status FROM idem.pipeline_audit a
                WHERE a.dag_id = $1 AND a.task_id = u.task_id AND a.partition_key = $2 AND a.status <> 'skipped'
                ORDER BY a.id DESC LIMIT 1) IS DISTINCT FROM 'success')`

// QueueJoinReady queues on b the join's lock for (pipeline, downstream,
// partition) and then whether every dataset of others has succeeded for the
// partition as of its latest attempt; ready receives the answer. The check
// is its own statement after the lock, so under READ COMMITTED it sees every
// upstream that committed before the lock was granted.
func QueueJoinReady(b *pgx.Batch, pipeline, downstream, partition string, others []string, ready *bool) {
	b.Queue(LockSQL, joinLockKey(pipeline, downstream, partition))
	b.Queue(joinReadySQL, pipeline, partition, others).QueryRow(func(r pgx.Row) error { return r.Scan(ready) })
}
