package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A partition's state, beside the statuses of its latest attempt.
const (
	// StatusMissing is the state of a partition with no attempt at all.
	StatusMissing = "missing"
	// StateRejected is the state of a partition whose latest load its
	// checks refused: it failed, and the rows loaded before it stay.
	StateRejected = "rejected"
	// StateOutdated is the state of a partition whose latest load succeeded
	// under another definition than the dataset's current one (Outdated).
	StateOutdated = "outdated"
)

// Outdated reports whether a load that ran definition loaded is outdated
// against the dataset's current definition: it ran another one for sure.
// A load from before idem recorded definitions (loaded nil) is not known
// to be, so the grid, `idem audit status` and `idem audit why` do not
// flag a whole history after an upgrade (`idem audit outdated` lists
// those apart); with current "" (not known) nothing is.
func Outdated(loaded *string, current string) bool {
	return current != "" && loaded != nil && *loaded != current
}

// StateOf is the one rule that says what the audit knows of a partition
// from its latest attempt, skipped duplicates aside (they say nothing
// new), whose status and error kind are given (status "": it has none;
// for a success, its kind, schema v24): StatusMissing, StateRejected,
// StateRetracted, or the attempt's status (started, success, failed).
// `idem audit status` and the status page both decide by it.
func StateOf(status, errorKind string) string {
	switch {
	case status == "":
		return StatusMissing
	case status == StatusFailed && errorKind == KindCheck:
		return StateRejected
	case status == StatusSuccess && errorKind == KindRetracted:
		return StateRetracted
	}
	return status
}

// Waiting is an upstream a join waits for, and its state (StateOf) at the
// partition.
type Waiting struct {
	Dataset, State string
}

func (w Waiting) String() string { return w.Dataset + ": " + w.State }

// WaitingFor lists, in order, the upstreams of a join whose state at a
// partition (state of each, as StateOf says it) is not success or
// retracted (empty on purpose, settled): until there are none, a join has
// nothing new to load. A join that loaded keeps its last load meanwhile.
func WaitingFor(upstreams []string, state func(dataset string) string) []Waiting {
	var out []Waiting
	for _, up := range upstreams {
		if s := state(up); s != StatusSuccess && s != StateRetracted {
			out = append(out, Waiting{Dataset: up, State: s})
		}
	}
	return out
}

// Latest is the latest attempt of one partition of a dataset, skips
// aside, and cancellations too unless the partition has nothing else: a
// cancelled backfill event loaded nothing, so a partition loaded before
// it stays loaded.
type Latest struct {
	Dataset   string
	Partition string
	Status    string // started, success, failed
	ErrorKind string
	RunID     string
	Attempt   int
	// Definition is the hash of the definition the attempt ran (nil:
	// not recorded).
	Definition *string
}

// LatestInRange returns the latest attempt of every partition of the
// datasets with a key from..to inclusive. It reads
// pipeline_audit_partition_idx one partition at a time, so its cost follows
// the range, not the history.
func LatestInRange(ctx context.Context, db Querier, pipeline string, datasets []string, from, to string) ([]Latest, error) {
	rows, err := db.Query(ctx, `
		SELECT DISTINCT ON (task_id, partition_key) task_id, partition_key, status, coalesce(error_kind, kind, ''), run_id, attempt, definition_hash
		  FROM idem.pipeline_audit
		 WHERE dag_id = $1 AND task_id = ANY($2) AND partition_key >= $3 AND partition_key <= $4 AND status <> 'skipped'
		 ORDER BY task_id, partition_key, status = 'cancelled', id DESC`,
		pipeline, datasets, from, to)
	if err != nil {
		return nil, fmt.Errorf("audit: latest attempts: %w", err)
	}
	var out []Latest
	var l Latest
	_, err = pgx.ForEachRow(rows, []any{&l.Dataset, &l.Partition, &l.Status, &l.ErrorKind, &l.RunID, &l.Attempt, &l.Definition}, func() error {
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: latest attempts: %w", err)
	}
	return out, nil
}

// RecentPartitions returns up to limit partition keys of the datasets, the
// most recently attempted first, looking at the newest scan attempts only
// (so the cost does not grow with the history).
func RecentPartitions(ctx context.Context, db Querier, pipeline string, datasets []string, limit, scan int) ([]string, error) {
	rows, err := db.Query(ctx, `
		SELECT partition_key FROM (
		    SELECT partition_key, id FROM idem.pipeline_audit
		     WHERE dag_id = $1 AND task_id = ANY($2)
		     ORDER BY id DESC LIMIT $4) recent
		 GROUP BY partition_key ORDER BY max(id) DESC LIMIT $3`,
		pipeline, datasets, limit, scan)
	if err != nil {
		return nil, fmt.Errorf("audit: recent partitions: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("audit: recent partitions: %w", err)
	}
	return keys, nil
}

// PartitionAttempt is one attempt at a partition, as an operator reads it.
type PartitionAttempt struct {
	ID          int64
	RunID       string
	Attempt     int
	Status      string
	Force       bool
	Rows        *int64
	Error       string
	ErrorKind   string
	TriggeredBy string
	StreamSeq   *int64
	StartedAt   time.Time
	FinishedAt  *time.Time
}

// Duration is how long the attempt ran; zero while it runs.
func (a PartitionAttempt) Duration() time.Duration {
	if a.FinishedAt == nil {
		return 0
	}
	return a.FinishedAt.Sub(a.StartedAt)
}

// PartitionAttempts returns the newest limit attempts of one partition,
// newest first.
func PartitionAttempts(ctx context.Context, db Querier, pipeline, dataset, partition string, limit int) ([]PartitionAttempt, error) {
	rows, err := db.Query(ctx, `
		SELECT id, run_id, attempt, status, force, row_count, coalesce(error, ''), coalesce(error_kind, ''),
		       coalesce(triggered_by, ''), stream_seq, started_at, finished_at
		  FROM idem.pipeline_audit
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3
		 ORDER BY id DESC LIMIT $4`,
		pipeline, dataset, partition, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: attempts of %s %s: %w", dataset, partition, err)
	}
	var out []PartitionAttempt
	var a PartitionAttempt
	_, err = pgx.ForEachRow(rows, []any{&a.ID, &a.RunID, &a.Attempt, &a.Status, &a.Force, &a.Rows, &a.Error, &a.ErrorKind,
		&a.TriggeredBy, &a.StreamSeq, &a.StartedAt, &a.FinishedAt}, func() error {
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: attempts of %s %s: %w", dataset, partition, err)
	}
	return out, nil
}

// Operator actions, as recorded in idem.operator_actions.
const (
	ActionReplay   = "replay"
	ActionBackfill = "backfill"
	// ActionReload is a forced run of one partition (schema v16).
	ActionReload = "reload"
	// ActionRestore and ActionRetract put an archived version of a
	// partition back and empty a partition on purpose (schema v24).
	ActionRestore = "restore"
	ActionRetract = "retract"
)

// RecordAction writes what an operator asked for, before it is done, and
// returns the row's id for FinishAction.
func RecordAction(ctx context.Context, db Querier, pipeline, action, requestedBy, remoteAddr string, detail any) (int64, error) {
	b, err := json.Marshal(detail)
	if err != nil {
		return 0, fmt.Errorf("audit: action detail: %w", err)
	}
	var id int64
	err = db.QueryRow(ctx, `
		INSERT INTO idem.operator_actions (dag_id, action, requested_by, remote_addr, detail)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		// As text: in statement_mode exec a []byte is sent as bytea.
		pipeline, action, requestedBy, nullString(remoteAddr), string(b)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("audit: record %s: %w", action, err)
	}
	return id, nil
}

// FinishAction records what an operator's action did.
func FinishAction(ctx context.Context, db Querier, id int64, outcome string) error {
	if _, err := db.Exec(ctx, `UPDATE idem.operator_actions SET outcome = $2, finished_at = clock_timestamp() WHERE id = $1`, id, outcome); err != nil {
		return fmt.Errorf("audit: finish action %d: %w", id, err)
	}
	return nil
}

// Action is one recorded operator action.
type Action struct {
	ID          int64
	Action      string
	RequestedBy string
	RemoteAddr  string
	Detail      string
	Outcome     string
	RequestedAt time.Time
}

// RecentActions returns the newest limit operator actions of the pipeline.
func RecentActions(ctx context.Context, db Querier, pipeline string, limit int) ([]Action, error) {
	rows, err := db.Query(ctx, `
		SELECT id, action, requested_by, coalesce(remote_addr, ''), detail::text, coalesce(outcome, ''), requested_at
		  FROM idem.operator_actions WHERE dag_id = $1 ORDER BY id DESC LIMIT $2`, pipeline, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: recent actions: %w", err)
	}
	var out []Action
	var a Action
	_, err = pgx.ForEachRow(rows, []any{&a.ID, &a.Action, &a.RequestedBy, &a.RemoteAddr, &a.Detail, &a.Outcome, &a.RequestedAt}, func() error {
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: recent actions: %w", err)
	}
	return out, nil
}
