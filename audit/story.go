package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReverifyAttribute marks, in an attempt's attributes, a load run again
// after a warehouse failover (internal/reverify).
const ReverifyAttribute = "idem.reverify"

// Story is what the audit records about one partition, newest first: the
// first half of `idem audit why` (the events and dead letters are in NATS).
type Story struct {
	Attempts []StoryAttempt `json:"attempts"`
	Checks   []CheckRow     `json:"checks"`
	// Winner is the ledger's latest successful run, nil before one.
	Winner *Winner `json:"winner"`
	// Downstream are the events this partition's loads queued for their
	// then: datasets, sent or pending.
	Downstream []Downstream `json:"downstream"`
	// Actions are the operator actions that named this partition.
	Actions []StoryAction `json:"actions"`
	// SchemaChanges are the differences between the source's columns and
	// the target's that its loads met (on_schema_change), each beside its
	// attempt (AuditID), as `idem audit schema` lists them.
	SchemaChanges []SchemaChangeRow `json:"schema_changes"`
	// Truncated says the attempts were cut at the limit.
	Truncated bool `json:"truncated"`
	// SchemaChangesTruncated says the schema changes were.
	SchemaChangesTruncated bool `json:"schema_changes_truncated,omitempty"`
	// SourceFiles are the files the attempts shown read (a dataset whose
	// source is files), newest attempt first.
	SourceFiles []SourceFilesRead `json:"source_files,omitempty"`
	// Waiting is the partition's wait for its source, while no attempt
	// has overtaken it; nil otherwise.
	Waiting *Wait `json:"waiting,omitempty"`
	// Paused is the dataset's pause in force (`idem pause`): the
	// partition's pending events are held; nil when none is.
	Paused *Pause `json:"paused,omitempty"`
	// Recheck is what the rechecks know of the partition's source
	// (recheck:): its fingerprint, its last check, the last change found.
	Recheck *Recheck `json:"recheck,omitempty"`
}

// StoryAttempt is one attempt of the partition.
type StoryAttempt struct {
	ID        int64  `json:"id"`
	RunID     string `json:"run_id"`
	Attempt   int    `json:"attempt"`
	Status    string `json:"status"`
	Force     bool   `json:"force"`
	Rows      *int64 `json:"rows"`
	Inserted  *int64 `json:"rows_inserted"`
	Updated   *int64 `json:"rows_updated"`
	Deleted   *int64 `json:"rows_deleted"`
	Error     string `json:"error,omitempty"`
	ErrorKind string `json:"error_kind,omitempty"`
	// Kind is what a success did besides a load: restored, retracted
	// (schema v24); "" for a load.
	Kind        string            `json:"kind,omitempty"`
	StreamSeq   *int64            `json:"stream_seq"`
	TriggeredBy string            `json:"triggered_by,omitempty"`
	Attributes  map[string]string `json:"attributes,omitempty"`
	StartedAt   time.Time         `json:"started_at"`
	FinishedAt  *time.Time        `json:"finished_at"`
	// Reverify: a load run again after a warehouse failover.
	Reverify bool `json:"reverify"`
	// Definition is the hash of the dataset's definition the attempt ran;
	// nil before idem recorded definitions (schema v22).
	Definition *string `json:"definition"`
}

// Duration is how long the attempt ran; zero while it runs.
func (a StoryAttempt) Duration() time.Duration {
	if a.FinishedAt == nil {
		return 0
	}
	return a.FinishedAt.Sub(a.StartedAt)
}

// Upstream splits TriggeredBy ("dataset:partition:run_id") into the
// upstream load that triggered this attempt; ok is false when none did.
func (a StoryAttempt) Upstream() (dataset, partition, runID string, ok bool) {
	ds, rest, ok1 := strings.Cut(a.TriggeredBy, ":")
	// The run_id is last and may hold ':' itself; the partition never does.
	part, run, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || ds == "" {
		return "", "", "", false
	}
	return ds, part, run, true
}

// Winner is the ledger's entry for the run that last loaded the partition.
type Winner struct {
	RunID       string    `json:"run_id"`
	AuditID     int64     `json:"audit_id"`
	Loads       int       `json:"loads"`
	SucceededAt time.Time `json:"succeeded_at"`
}

// Downstream is one event a load of the partition queued for a then:
// dataset.
type Downstream struct {
	Dataset   string     `json:"dataset"`
	Partition string     `json:"partition"`
	RunID     string     `json:"run_id"`
	AuditID   int64      `json:"audit_id"`
	CreatedAt time.Time  `json:"created_at"`
	SentAt    *time.Time `json:"sent_at"`
	StreamSeq *int64     `json:"stream_seq"`
	Attempts  int        `json:"publish_attempts"`
	LastError string     `json:"last_error,omitempty"`
}

// StoryAction is an operator action that named the partition.
type StoryAction struct {
	ID          int64          `json:"id"`
	Action      string         `json:"action"`
	RequestedBy string         `json:"requested_by"`
	Detail      map[string]any `json:"detail"`
	Outcome     string         `json:"outcome,omitempty"`
	RequestedAt time.Time      `json:"requested_at"`
	FinishedAt  *time.Time     `json:"finished_at"`
}

// ReadStory reads the partition's story: its newest limit attempts, their
// checks' outcomes, its newest limit schema changes, the ledger's winner,
// the downstream events they queued and the operator actions that named
// it. Each read takes the index on the partition; one snapshot (REPEATABLE
// READ, read only) makes the parts agree.
func ReadStory(ctx context.Context, db Beginner, pipeline, dataset, partition string, limit int) (Story, error) {
	var s Story
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := readStoryAttempts(ctx, tx, pipeline, dataset, partition, limit, &s); err != nil {
			return err
		}
		var err error
		if s.Checks, err = partitionChecks(ctx, tx, pipeline, dataset, partition, 4*limit); err != nil {
			return err
		}
		if s.Checks == nil {
			s.Checks = []CheckRow{}
		}
		if err := readStorySchemaChanges(ctx, tx, pipeline, dataset, partition, limit, &s); err != nil {
			return err
		}
		if s.SourceFiles, err = SourceFilesOf(ctx, tx, pipeline, dataset, partition, limit); err != nil {
			return err
		}
		if s.Waiting, err = WaitOf(ctx, tx, pipeline, dataset, partition); err != nil {
			return err
		}
		if s.Recheck, err = RecheckOf(ctx, tx, pipeline, dataset, partition); err != nil {
			return err
		}
		if s.Paused, err = PauseOf(ctx, tx, pipeline, dataset); err != nil {
			return err
		}
		if err := readWinner(ctx, tx, pipeline, dataset, partition, &s); err != nil {
			return err
		}
		if err := readDownstream(ctx, tx, &s); err != nil {
			return err
		}
		return readStoryActions(ctx, tx, pipeline, dataset, partition, &s)
	})
	if err != nil {
		return Story{}, fmt.Errorf("audit: story of %s %s: %w", dataset, partition, err)
	}
	return s, nil
}

// Beginner starts a transaction: a pool or a connection.
type Beginner interface {
	BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error)
}

func readStoryAttempts(ctx context.Context, tx pgx.Tx, pipeline, dataset, partition string, limit int, s *Story) error {
	rows, err := tx.Query(ctx, `
		SELECT id, run_id, attempt, status, force, row_count, rows_inserted, rows_updated, rows_deleted,
		       coalesce(error, ''), coalesce(error_kind, ''), stream_seq, coalesce(triggered_by, ''),
		       coalesce(attributes::text, ''), started_at, finished_at, definition_hash, coalesce(kind, '')
		  FROM idem.pipeline_audit
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3
		 ORDER BY id DESC LIMIT $4`, pipeline, dataset, partition, limit+1)
	if err != nil {
		return err
	}
	s.Attempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoryAttempt, error) {
		var a StoryAttempt
		var attrs string
		err := r.Scan(&a.ID, &a.RunID, &a.Attempt, &a.Status, &a.Force, &a.Rows, &a.Inserted, &a.Updated, &a.Deleted,
			&a.Error, &a.ErrorKind, &a.StreamSeq, &a.TriggeredBy, &attrs, &a.StartedAt, &a.FinishedAt, &a.Definition, &a.Kind)
		if err == nil && attrs != "" {
			// Attributes are strings when idem wrote them; anything else
			// is shown as its JSON rather than failing the story.
			var m map[string]any
			if json.Unmarshal([]byte(attrs), &m) == nil {
				a.Attributes = make(map[string]string, len(m))
				for k, v := range m {
					if sv, ok := v.(string); ok {
						a.Attributes[k] = sv
					} else {
						b, _ := json.Marshal(v)
						a.Attributes[k] = string(b)
					}
				}
			}
			a.Reverify = a.Attributes[ReverifyAttribute] != ""
		}
		return a, err
	})
	if err != nil {
		return err
	}
	if len(s.Attempts) > limit {
		s.Attempts, s.Truncated = s.Attempts[:limit], true
	}
	if s.Attempts == nil {
		s.Attempts = []StoryAttempt{}
	}
	return nil
}

// readStorySchemaChanges reads the partition's changes as idem audit schema
// --partition does, one more than limit to know when they were cut.
func readStorySchemaChanges(ctx context.Context, tx pgx.Tx, pipeline, dataset, partition string, limit int, s *Story) error {
	cs, err := readSchemaChanges(ctx, tx, partitionSchemaChanges, pipeline, dataset, partition, limit+1)
	if err != nil {
		return err
	}
	if len(cs) > limit {
		cs, s.SchemaChangesTruncated = cs[:limit], true
	}
	if cs == nil {
		cs = []SchemaChangeRow{}
	}
	s.SchemaChanges = cs
	return nil
}

func readWinner(ctx context.Context, tx pgx.Tx, pipeline, dataset, partition string, s *Story) error {
	var w Winner
	err := tx.QueryRow(ctx, `
		SELECT run_id, audit_id, loads, succeeded_at FROM idem.run_ledger
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3
		 ORDER BY audit_id DESC LIMIT 1`, pipeline, dataset, partition).Scan(&w.RunID, &w.AuditID, &w.Loads, &w.SucceededAt)
	switch {
	case err == pgx.ErrNoRows:
		return nil
	case err != nil:
		return err
	}
	s.Winner = &w
	return nil
}

func readDownstream(ctx context.Context, tx pgx.Tx, s *Story) error {
	s.Downstream = []Downstream{}
	ids := make([]int64, 0, len(s.Attempts))
	for _, a := range s.Attempts {
		if a.Status == StatusSuccess {
			ids = append(ids, a.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
		SELECT o.dataset, o.partition_key, o.run_id, o.audit_id, o.created_at, o.sent_at, o.stream_seq, o.attempts,
		       coalesce(o.last_error, '')
		  FROM unnest($1::bigint[]) AS i(id)
		  JOIN idem.outbox o ON o.audit_id = i.id AND o.result IS NULL AND o.lineage IS NULL
		 ORDER BY o.id DESC`, ids)
	if err != nil {
		return err
	}
	s.Downstream, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Downstream, error) {
		var d Downstream
		err := r.Scan(&d.Dataset, &d.Partition, &d.RunID, &d.AuditID, &d.CreatedAt, &d.SentAt, &d.StreamSeq, &d.Attempts, &d.LastError)
		return d, err
	})
	return err
}

// readStoryActions reads the newest operator actions whose detail names
// the partition (a reload, a replay's) or a backfill's range holding it.
func readStoryActions(ctx context.Context, tx pgx.Tx, pipeline, dataset, partition string, s *Story) error {
	rows, err := tx.Query(ctx, `
		SELECT id, action, requested_by, detail::text, coalesce(outcome, ''), requested_at, finished_at
		  FROM idem.operator_actions
		 WHERE dag_id = $1 AND detail ->> 'dataset' = $2
		   AND (detail ->> 'partition' = $3 OR ($3 BETWEEN detail ->> 'from' AND detail ->> 'to'))
		 ORDER BY id DESC LIMIT 20`, pipeline, dataset, partition)
	if err != nil {
		return err
	}
	s.Actions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoryAction, error) {
		var a StoryAction
		var detail string
		err := r.Scan(&a.ID, &a.Action, &a.RequestedBy, &detail, &a.Outcome, &a.RequestedAt, &a.FinishedAt)
		if err == nil {
			_ = json.Unmarshal([]byte(detail), &a.Detail)
		}
		return a, err
	})
	if s.Actions == nil {
		s.Actions = []StoryAction{}
	}
	return err
}
