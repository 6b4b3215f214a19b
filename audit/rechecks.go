package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FingerprintValue is one column of a fingerprint's row, as text; nil is
// NULL.
type FingerprintValue struct {
	Name  string  `json:"name"`
	Value *string `json:"value"`
}

// SourceFingerprint summarises a partition's source: a hash that moves
// when its rows do, and the values it was taken from, for people.
type SourceFingerprint struct {
	Hash   string             `json:"hash"`
	Values []FingerprintValue `json:"values,omitempty"`
}

// String is "count 1204, max 2026-12-01 10:00:00+00".
func (f SourceFingerprint) String() string {
	var b strings.Builder
	for i, v := range f.Values {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v.Name)
		b.WriteByte(' ')
		if v.Value == nil {
			b.WriteString("NULL")
		} else {
			b.WriteString(*v.Value)
		}
	}
	return b.String()
}

// Moved says what changed between two fingerprints: "count 1204 → 1377",
// the values that differ; "" when none differ by name (the hash alone).
func Moved(from, to SourceFingerprint) string {
	old := map[string]*string{}
	for _, v := range from.Values {
		old[v.Name] = v.Value
	}
	text := func(s *string) string {
		if s == nil {
			return "NULL"
		}
		return *s
	}
	var parts []string
	for _, v := range to.Values {
		o, ok := old[v.Name]
		if ok && text(o) == text(v.Value) {
			continue
		}
		if !ok {
			parts = append(parts, v.Name+" "+text(v.Value))
			continue
		}
		parts = append(parts, v.Name+" "+text(o)+" → "+text(v.Value))
	}
	return strings.Join(parts, ", ")
}

const recordFingerprintSQL = `
		INSERT INTO idem.source_fingerprints AS f (dag_id, task_id, partition_key, audit_id, fingerprint, fp_values)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (dag_id, task_id, partition_key) DO UPDATE
		   SET audit_id = EXCLUDED.audit_id, fingerprint = EXCLUDED.fingerprint, fp_values = EXCLUDED.fp_values,
		       taken_at = EXCLUDED.taken_at`

// QueueRecordFingerprint queues on b the fingerprint of the source a load
// read, in the load's transaction: the partition's fingerprint is its
// latest success's, or nothing changed. What a recheck recorded of an
// earlier move stays.
func QueueRecordFingerprint(b *pgx.Batch, id int64, k RunKey, fp SourceFingerprint) error {
	vals, err := json.Marshal(fp.Values)
	if err != nil {
		return err
	}
	b.Queue(recordFingerprintSQL, k.Pipeline, k.Dataset, k.Partition, id, fp.Hash, vals)
	return nil
}

// RecheckCandidate is one partition a recheck pass may ask again: its
// latest attempt (skips aside) and the fingerprint stored for it.
type RecheckCandidate struct {
	Partition string
	// Latest is the latest attempt's audit id, status and run ("" status:
	// never attempted).
	LatestID     int64
	LatestStatus string
	LatestRunID  string
	// Stored is the fingerprint of its latest success (or the baseline a
	// pass took); nil when none was stored.
	Stored *SourceFingerprint
	// StoredID is the audit id Stored describes; MovedRunID the reload
	// the last move published ("" for none).
	StoredID   int64
	MovedRunID string
}

// RecheckCandidates returns, for each key in order, its latest attempt and
// stored fingerprint: one index lookup per key, whatever the history.
func RecheckCandidates(ctx context.Context, db Querier, pipeline, dataset string, keys []string) ([]RecheckCandidate, error) {
	rows, err := db.Query(ctx, `
		SELECT k.key, coalesce(a.id, 0), coalesce(a.status, ''), coalesce(a.run_id, ''),
		       f.fingerprint, f.fp_values, coalesce(f.audit_id, 0), coalesce(f.moved_run_id, '')
		  FROM unnest($3::text[]) WITH ORDINALITY AS k(key, ord)
		  LEFT JOIN LATERAL (
		       SELECT p.id, p.status, p.run_id
		         FROM idem.pipeline_audit p
		        WHERE p.dag_id = $1 AND p.task_id = $2 AND p.partition_key = k.key AND p.status <> 'skipped'
		        ORDER BY p.id DESC LIMIT 1) a ON true
		  LEFT JOIN idem.source_fingerprints f
		         ON f.dag_id = $1 AND f.task_id = $2 AND f.partition_key = k.key
		 ORDER BY k.ord`, pipeline, dataset, keys)
	if err != nil {
		return nil, fmt.Errorf("audit: recheck candidates: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RecheckCandidate, error) {
		var (
			c    RecheckCandidate
			hash *string
			vals []byte
		)
		if err := r.Scan(&c.Partition, &c.LatestID, &c.LatestStatus, &c.LatestRunID, &hash, &vals, &c.StoredID, &c.MovedRunID); err != nil {
			return c, err
		}
		if hash != nil {
			c.Stored = &SourceFingerprint{Hash: *hash}
			if err := json.Unmarshal(vals, &c.Stored.Values); err != nil {
				return c, err
			}
		}
		return c, nil
	})
}

// RecordRecheck stamps one check of a partition's source on its
// fingerprint row. A partition that had none (loaded before recheck:
// was configured) gets fp as its baseline, describing its latest success
// id.
func RecordRecheck(ctx context.Context, db Querier, k RunKey, id int64, fp SourceFingerprint) error {
	vals, err := json.Marshal(fp.Values)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, `
		INSERT INTO idem.source_fingerprints AS f (dag_id, task_id, partition_key, audit_id, fingerprint, fp_values, checked_at, checks)
		VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), 1)
		ON CONFLICT (dag_id, task_id, partition_key) DO UPDATE
		   SET checked_at = clock_timestamp(), checks = f.checks + 1`,
		k.Pipeline, k.Dataset, k.Partition, id, fp.Hash, vals)
	if err != nil {
		return fmt.Errorf("audit: record the recheck of %s %s: %w", k.Dataset, k.Partition, err)
	}
	return nil
}

// RecordMove records a check that found the source moved from the
// fingerprint the pass compared with to to, and the reload runID
// published for it. from is the pass's, never the row's: the reload can
// commit, and store its own fingerprint on the row, before this runs.
func RecordMove(ctx context.Context, db Querier, k RunKey, id int64, from, to SourceFingerprint, runID string) error {
	fromJSON, err := json.Marshal(from)
	if err != nil {
		return err
	}
	toJSON, err := json.Marshal(to)
	if err != nil {
		return err
	}
	vals, err := json.Marshal(to.Values)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, `
		INSERT INTO idem.source_fingerprints AS f (dag_id, task_id, partition_key, audit_id, fingerprint, fp_values, checked_at, checks,
		                                           moved_run_id, moved_at, moved_from, moved_to)
		VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), 1, $7, clock_timestamp(), $8, $9)
		ON CONFLICT (dag_id, task_id, partition_key) DO UPDATE
		   SET checked_at = clock_timestamp(), checks = f.checks + 1,
		       moved_run_id = $7, moved_at = clock_timestamp(), moved_from = $8, moved_to = $9`,
		k.Pipeline, k.Dataset, k.Partition, id, to.Hash, vals, runID, fromJSON, toJSON)
	if err != nil {
		return fmt.Errorf("audit: record the recheck of %s %s: %w", k.Dataset, k.Partition, err)
	}
	return nil
}

// Recheck is what the rechecks know of one partition: its stored
// fingerprint, its last check, and the last move they found.
type Recheck struct {
	Fingerprint SourceFingerprint `json:"fingerprint"`
	TakenAt     time.Time         `json:"taken_at"`
	CheckedAt   *time.Time        `json:"checked_at,omitempty"`
	Checks      int64             `json:"checks"`
	// Move is the last change a recheck found and the reload it published.
	Move *RecheckMove `json:"move,omitempty"`
}

// RecheckMove is one change of a partition's source a recheck found.
type RecheckMove struct {
	RunID string            `json:"run_id"`
	At    time.Time         `json:"at"`
	From  SourceFingerprint `json:"from"`
	To    SourceFingerprint `json:"to"`
}

// What says what moved: "count 1204 → 1377".
func (m RecheckMove) What() string {
	if w := Moved(m.From, m.To); w != "" {
		return w
	}
	return "fingerprint " + short(m.From.Hash) + " → " + short(m.To.Hash)
}

func short(h string) string { return h[:min(12, len(h))] }

// RecheckOf returns what the rechecks know of a partition; nil when its
// source was never fingerprinted.
func RecheckOf(ctx context.Context, db Querier, pipeline, dataset, partition string) (*Recheck, error) {
	var (
		r              Recheck
		vals, from, to []byte
		movedRun       *string
		movedAt        *time.Time
	)
	err := db.QueryRow(ctx, `
		SELECT fingerprint, fp_values, taken_at, checked_at, checks, moved_run_id, moved_at, moved_from, moved_to
		  FROM idem.source_fingerprints
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3`, pipeline, dataset, partition).
		Scan(&r.Fingerprint.Hash, &vals, &r.TakenAt, &r.CheckedAt, &r.Checks, &movedRun, &movedAt, &from, &to)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: recheck of %s %s: %w", dataset, partition, err)
	}
	if err := json.Unmarshal(vals, &r.Fingerprint.Values); err != nil {
		return nil, err
	}
	if movedRun != nil && movedAt != nil {
		m := &RecheckMove{RunID: *movedRun, At: *movedAt}
		if err := json.Unmarshal(from, &m.From); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(to, &m.To); err != nil {
			return nil, err
		}
		r.Move = m
	}
	return &r, nil
}
