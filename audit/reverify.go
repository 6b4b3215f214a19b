package audit

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Re-verification after a warehouse failover: the queries that say which
// recent events the warehouse still has a verdict for, and which server it
// is.

// ReverifyLease is the name of the lease (TryLease) one re-verification
// pass of a pipeline holds: replicas take turns. The prefix keeps it apart
// from the prune lease, whatever the pipeline's name.
func ReverifyLease(pipeline string) string { return "reverify:" + pipeline }

// Delivered is one event of the stream as a re-verification reads it.
type Delivered struct {
	Dataset, Partition string
	StreamSeq          uint64
}

// Settled returns the stream sequences among evs whose message has a
// verdict in the audit: a success, a skipped duplicate, or a fatal failure.
// One statement, an index seek per partition.
func Settled(ctx context.Context, db Querier, pipeline string, evs []Delivered) (map[uint64]bool, error) {
	out := make(map[uint64]bool, len(evs))
	if len(evs) == 0 {
		return out, nil
	}
	ds, parts, seqs := make([]string, len(evs)), make([]string, len(evs)), make([]int64, len(evs))
	for i, e := range evs {
		ds[i], parts[i], seqs[i] = e.Dataset, e.Partition, int64(e.StreamSeq)
	}
	rows, err := db.Query(ctx, `
		SELECT e.seq FROM unnest($2::text[], $3::text[], $4::bigint[]) AS e(task_id, partition_key, seq)
		 WHERE EXISTS (SELECT 1 FROM idem.pipeline_audit a
		                WHERE a.dag_id = $1 AND a.task_id = e.task_id AND a.partition_key = e.partition_key
		                  AND a.stream_seq = e.seq
		                  AND (a.status IN ('success', 'skipped') OR a.status = 'failed' AND a.error_kind = 'fatal'))`,
		pipeline, ds, parts, seqs)
	if err != nil {
		return nil, fmt.Errorf("audit: settled events: %w", err)
	}
	seqList, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("audit: settled events: %w", err)
	}
	for _, s := range seqList {
		out[uint64(s)] = true
	}
	return out, nil
}

// Identity names the PostgreSQL server a pipeline loads into: the cluster's
// system identifier (kept by its streaming standbys) and its timeline (a
// promotion starts a new one).
type Identity struct {
	SystemIdentifier string
	Timeline         int
}

func (i Identity) String() string {
	return fmt.Sprintf("system %s, timeline %d", i.SystemIdentifier, i.Timeline)
}

// CurrentIdentity reads the identity of the server db is connected to. A
// server in recovery (a standby) has no timeline of its own to write on:
// it is an error.
func CurrentIdentity(ctx context.Context, db Querier) (Identity, error) {
	var id Identity
	var walFile *string
	err := db.QueryRow(ctx, `
		SELECT system_identifier::text,
		       CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END
		  FROM pg_control_system()`).Scan(&id.SystemIdentifier, &walFile)
	if err != nil {
		return id, fmt.Errorf("audit: warehouse identity: %w", err)
	}
	if walFile == nil || len(*walFile) < 8 {
		return id, errors.New("audit: warehouse identity: the server is in recovery (a standby)")
	}
	// A WAL file's name begins with its timeline, 8 hex digits.
	if _, err := fmt.Sscanf((*walFile)[:8], "%08X", &id.Timeline); err != nil {
		return id, fmt.Errorf("audit: warehouse identity: WAL file %q: %w", *walFile, err)
	}
	return id, nil
}

// StoredIdentity is the identity the pipeline last verified against; ok is
// false when none was recorded.
func StoredIdentity(ctx context.Context, db Querier, pipeline string) (id Identity, ok bool, err error) {
	err = db.QueryRow(ctx, `SELECT system_identifier, timeline FROM idem.warehouse_identity WHERE dag_id = $1`, pipeline).
		Scan(&id.SystemIdentifier, &id.Timeline)
	if errors.Is(err, pgx.ErrNoRows) {
		return id, false, nil
	}
	if err != nil {
		return id, false, fmt.Errorf("audit: stored warehouse identity: %w", err)
	}
	return id, true, nil
}

// StoreIdentity records id as verified for pipeline, durably (the pool may
// commit bookkeeping asynchronously; this commit waits for its flush).
func StoreIdentity(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, pipeline string, id Identity) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO idem.warehouse_identity (dag_id, system_identifier, timeline) VALUES ($1, $2, $3)
			ON CONFLICT (dag_id) DO UPDATE SET system_identifier = EXCLUDED.system_identifier,
			       timeline = EXCLUDED.timeline, verified_at = clock_timestamp()`, pipeline, id.SystemIdentifier, id.Timeline)
		return err
	})
	if err != nil {
		return fmt.Errorf("audit: store warehouse identity: %w", err)
	}
	return nil
}

// Progress is how far a re-verification pass of a pipeline got: every
// event of its window up to Through of Stream has a verdict on the server
// ID names.
type Progress struct {
	ID      Identity
	Stream  string
	Through uint64
}

// ReverifyProgress is the progress a pass of pipeline last stored; ok is
// false when none was.
func ReverifyProgress(ctx context.Context, db Querier, pipeline string) (p Progress, ok bool, err error) {
	var through int64
	err = db.QueryRow(ctx, `
		SELECT system_identifier, timeline, stream, through_seq FROM idem.reverify_progress WHERE dag_id = $1`, pipeline).
		Scan(&p.ID.SystemIdentifier, &p.ID.Timeline, &p.Stream, &through)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("audit: re-verification progress: %w", err)
	}
	p.Through = uint64(through)
	return p, true, nil
}

// StoreReverifyProgress records p for pipeline. Progress on the same
// server and stream only moves forward: two passes that overlapped (a
// lease taken over from a replica that was slow, not dead) each settled a
// prefix of the window, and the longer one holds.
func StoreReverifyProgress(ctx context.Context, db Querier, pipeline string, p Progress) error {
	_, err := db.Exec(ctx, `
		INSERT INTO idem.reverify_progress AS p (dag_id, system_identifier, timeline, stream, through_seq)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (dag_id) DO UPDATE SET
		       through_seq = CASE WHEN (p.system_identifier, p.timeline, p.stream) = (EXCLUDED.system_identifier, EXCLUDED.timeline, EXCLUDED.stream)
		                          THEN greatest(p.through_seq, EXCLUDED.through_seq) ELSE EXCLUDED.through_seq END,
		       system_identifier = EXCLUDED.system_identifier, timeline = EXCLUDED.timeline, stream = EXCLUDED.stream,
		       updated_at = clock_timestamp()`,
		pipeline, p.ID.SystemIdentifier, p.ID.Timeline, p.Stream, int64(p.Through))
	if err != nil {
		return fmt.Errorf("audit: store re-verification progress: %w", err)
	}
	return nil
}
