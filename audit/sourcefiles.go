package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SourceFile is one file a load read: its identity in the store as the
// listing gave it, and the rows that came from it.
type SourceFile struct {
	URL       string     `json:"url"`
	Size      int64      `json:"size"`
	ETag      string     `json:"etag,omitempty"`
	VersionID string     `json:"version_id,omitempty"`
	Modified  *time.Time `json:"modified,omitempty"`
	SHA256    string     `json:"sha256,omitempty"`
	Rows      int64      `json:"rows"`
}

const recordSourceFilesSQL = `
		INSERT INTO idem.source_files (audit_id, ordinal, dag_id, task_id, partition_key, url, size_bytes, etag,
		                               version_id, modified_at, sha256, rows_read, fingerprint)
		SELECT $1, e.ord::integer, $2, $3, $4, r.url, r.size, nullif(r.etag, ''), nullif(r.version_id, ''), r.modified,
		       nullif(r.sha256, ''), r.rows, $6
		  FROM jsonb_array_elements($5::jsonb) WITH ORDINALITY AS e(doc, ord),
		       LATERAL jsonb_to_record(e.doc) AS r(url text, size bigint, etag text, version_id text,
		       modified timestamptz, sha256 text, rows bigint)`

// QueueRecordSourceFiles queues on b the files attempt id read, in the
// load's transaction: they commit with its rows, or not at all.
func QueueRecordSourceFiles(b *pgx.Batch, id int64, k RunKey, fingerprint string, fs []SourceFile) error {
	if len(fs) == 0 {
		return nil
	}
	data, err := json.Marshal(fs)
	if err != nil {
		return err
	}
	b.Queue(recordSourceFilesSQL, id, k.Pipeline, k.Dataset, k.Partition, data, fingerprint)
	return nil
}

// SourceFilesRead are the files of one attempt, with the listing's
// fingerprint.
type SourceFilesRead struct {
	AuditID     int64        `json:"audit_id"`
	Fingerprint string       `json:"fingerprint"`
	Files       []SourceFile `json:"files"`
}

// SourceFilesOf returns the files read by the newest attempts of a
// partition that recorded any (at most attempts of them), newest first.
func SourceFilesOf(ctx context.Context, db Querier, pipeline, dataset, partition string, attempts int) ([]SourceFilesRead, error) {
	rows, err := db.Query(ctx, `
		SELECT f.audit_id, f.fingerprint, f.url, f.size_bytes, coalesce(f.etag, ''), coalesce(f.version_id, ''),
		       f.modified_at, coalesce(f.sha256, ''), f.rows_read
		  FROM (SELECT DISTINCT audit_id FROM idem.source_files
		         WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3
		         ORDER BY audit_id DESC LIMIT $4) a
		  JOIN idem.source_files f ON f.audit_id = a.audit_id
		 ORDER BY f.audit_id DESC, f.ordinal`, pipeline, dataset, partition, attempts)
	if err != nil {
		return nil, fmt.Errorf("audit: source files: %w", err)
	}
	defer rows.Close()
	var out []SourceFilesRead
	for rows.Next() {
		var id int64
		var fp string
		var f SourceFile
		if err := rows.Scan(&id, &fp, &f.URL, &f.Size, &f.ETag, &f.VersionID, &f.Modified, &f.SHA256, &f.Rows); err != nil {
			return nil, fmt.Errorf("audit: source files: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].AuditID != id {
			out = append(out, SourceFilesRead{AuditID: id, Fingerprint: fp})
		}
		last := &out[len(out)-1]
		last.Files = append(last.Files, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: source files: %w", err)
	}
	return out, nil
}

// LoadedListing is what the watch of a files: source compares a
// partition's files with: its latest successful load and the fingerprint
// of the listing that load read, and its latest attempt.
type LoadedListing struct {
	Partition string
	// AuditID is the latest successful attempt's id; 0 when none.
	AuditID int64
	// Fingerprint is the listing that success read; "" when it read no
	// file (an empty partition, or a source that was not files then).
	Fingerprint string
	// LatestRunID and LatestStatus are the latest attempt's, skipped
	// duplicates aside; "" when there is none.
	LatestRunID  string
	LatestStatus string
	// LatestErrorKind is its error kind when it failed (KindFatal,
	// KindTransient, ...), and LatestReason, for a fatal one, the reason
	// word its error starts with (schema_mismatch, missing_files, ...).
	LatestErrorKind string
	LatestReason    string
	// LatestAttempt is its number among the loads of its event, which the
	// consumer sets against the event's budget; 0 when there is none.
	LatestAttempt int
	// LatestAt is when it finished, or when it started while it is
	// `started`; zero when there is none.
	LatestAt time.Time
}

// LastLoadedListings returns, for each partition key in the order given,
// the latest success's fingerprint and the latest attempt. Retention keeps
// what it reads: Prune never deletes a partition's latest success (nor so
// the files it read), nor its latest attempt before a newer one finished.
// Keys must be canonical. Each part reads pipeline_audit_partition_idx
// for one partition.
func LastLoadedListings(ctx context.Context, db Querier, pipeline, dataset string, partitions []string) ([]LoadedListing, error) {
	rows, err := db.Query(ctx, loadedListingsSQL, pipeline, dataset, partitions)
	if err != nil {
		return nil, fmt.Errorf("audit: loaded listings: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LoadedListing, error) {
		var l LoadedListing
		var at *time.Time
		err := r.Scan(&l.Partition, &l.AuditID, &l.Fingerprint, &l.LatestRunID, &l.LatestStatus,
			&l.LatestErrorKind, &l.LatestReason, &l.LatestAttempt, &at)
		if at != nil {
			l.LatestAt = *at
		}
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit: loaded listings: %w", err)
	}
	return out, nil
}

const loadedListingsSQL = `
		SELECT k.key, coalesce(s.id, 0), coalesce(f.fingerprint, ''), coalesce(l.run_id, ''), coalesce(l.status, ''),
		       coalesce(l.error_kind, ''), coalesce(l.reason, ''), coalesce(l.attempt, 0), l.at
		  FROM unnest($3::text[]) WITH ORDINALITY AS k(key, ord)
		  LEFT JOIN LATERAL (
		       SELECT p.id FROM idem.pipeline_audit p
		        WHERE p.dag_id = $1 AND p.task_id = $2 AND p.partition_key = k.key AND p.status = 'success'
		        ORDER BY p.id DESC LIMIT 1) s ON true
		  LEFT JOIN LATERAL (
		       SELECT sf.fingerprint FROM idem.source_files sf
		        WHERE sf.audit_id = s.id ORDER BY sf.ordinal LIMIT 1) f ON true
		  LEFT JOIN LATERAL (
		       SELECT p.run_id, p.status, p.error_kind, p.attempt, coalesce(p.finished_at, p.started_at) AS at,
		              CASE WHEN p.error_kind = 'fatal' THEN substring(p.error FROM '^([a-z_]+):') END AS reason
		         FROM idem.pipeline_audit p
		        WHERE p.dag_id = $1 AND p.task_id = $2 AND p.partition_key = k.key AND p.status <> 'skipped'
		        ORDER BY p.id DESC LIMIT 1) l ON true
		 ORDER BY k.ord`
