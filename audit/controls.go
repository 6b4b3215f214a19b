package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/internal/calendar"
)

// Operator controls (schema v23): a dataset paused, a backfill cancelled.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionCancel = "cancel"
	// StatusCancelled is an attempt that did not load because its backfill
	// was cancelled: not a failure; a later load of the partition
	// supersedes it.
	StatusCancelled = "cancelled"
)

// inTx runs fn in a transaction of db's, or in db's own when db is one
// already (it cannot begin).
func inTx(ctx context.Context, db Querier, fn func(tx Querier) error) error {
	if b, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	}); ok {
		return pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error { return fn(tx) })
	}
	return fn(db)
}

// Pause is one pause of a dataset, open or ended.
type Pause struct {
	ID       int64      `json:"-"`
	Dataset  string     `json:"-"`
	By       string     `json:"paused_by"`
	Reason   string     `json:"reason"`
	Since    time.Time  `json:"since"`
	Until    *time.Time `json:"until"` // nil: until resumed
	Resumed  *time.Time `json:"-"`
	ResumeBy string     `json:"-"`
	// ResumeReason is what the resume said, "" for none.
	ResumeReason string `json:"-"`
}

// InForceAt reports whether p holds its dataset's events at t.
func (p Pause) InForceAt(t time.Time) bool {
	return !t.Before(p.Since) && (p.Resumed == nil || t.Before(*p.Resumed)) && (p.Until == nil || t.Before(*p.Until))
}

// Ended is when p ended or will end by itself; nil while it lasts until
// resumed.
func (p Pause) Ended() *time.Time {
	switch {
	case p.Resumed != nil && (p.Until == nil || p.Resumed.Before(*p.Until)):
		return p.Resumed
	}
	return p.Until
}

func (p Pause) String() string {
	s := fmt.Sprintf("dataset paused by %s at %s: %s", p.By, p.Since.UTC().Format(time.RFC3339), p.Reason)
	switch {
	case p.Resumed != nil && (p.Until == nil || p.Resumed.Before(*p.Until)):
		s += fmt.Sprintf(" (resumed by %s at %s)", p.ResumeBy, p.Resumed.UTC().Format(time.RFC3339))
	case p.Until != nil:
		s += " (until " + p.Until.UTC().Format(time.RFC3339) + ")"
	}
	return s
}

// ErrNotPaused: Resume found no pause in force.
var ErrNotPaused = errors.New("audit: the dataset is not paused")

const pauseColumns = `id, task_id, paused_by, reason, since, until, resumed_at, coalesce(resumed_by, ''), coalesce(resume_reason, '')`

func scanPauses(rows pgx.Rows) ([]Pause, error) {
	var out []Pause
	var p Pause
	_, err := pgx.ForEachRow(rows, []any{&p.ID, &p.Dataset, &p.By, &p.Reason, &p.Since, &p.Until, &p.Resumed, &p.ResumeBy, &p.ResumeReason}, func() error {
		out = append(out, p)
		return nil
	})
	return out, err
}

// PauseDataset pauses dataset from now until until (nil: until resumed),
// in one transaction: a pause still open (in force or expired) is closed
// first, so a second pause replaces the first. It records the action.
func PauseDataset(ctx context.Context, db Querier, pipeline, dataset, by, reason string, until *time.Time, remoteAddr string) (Pause, error) {
	var p Pause
	err := inTx(ctx, db, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `
			UPDATE idem.dataset_pauses
			   SET resumed_at = least(clock_timestamp(), coalesce(until, 'infinity')), resumed_by = $3, resume_reason = 'replaced by a new pause'
			 WHERE dag_id = $1 AND task_id = $2 AND resumed_at IS NULL`, pipeline, dataset, by); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			INSERT INTO idem.dataset_pauses (dag_id, task_id, paused_by, reason, until)
			VALUES ($1, $2, $3, $4, $5) RETURNING `+pauseColumns, pipeline, dataset, by, reason, until)
		if err != nil {
			return err
		}
		ps, err := scanPauses(rows)
		if err != nil {
			return err
		}
		p = ps[0]
		_, err = RecordAction(ctx, tx, pipeline, ActionPause, by, remoteAddr, map[string]any{"dataset": dataset, "reason": reason, "until": until})
		return err
	})
	if err != nil {
		return Pause{}, fmt.Errorf("audit: pause %s: %w", dataset, err)
	}
	return p, nil
}

// ResumeDataset ends dataset's pause in force, or returns ErrNotPaused. It
// records the action.
func ResumeDataset(ctx context.Context, db Querier, pipeline, dataset, by, reason, remoteAddr string) (Pause, error) {
	var p Pause
	err := inTx(ctx, db, func(tx Querier) error {
		rows, err := tx.Query(ctx, `
			UPDATE idem.dataset_pauses
			   SET resumed_at = clock_timestamp(), resumed_by = $3, resume_reason = nullif($4, '')
			 WHERE dag_id = $1 AND task_id = $2 AND resumed_at IS NULL AND (until IS NULL OR until > clock_timestamp())
			RETURNING `+pauseColumns, pipeline, dataset, by, reason)
		if err != nil {
			return err
		}
		ps, err := scanPauses(rows)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			return ErrNotPaused
		}
		p = ps[0]
		_, err = RecordAction(ctx, tx, pipeline, ActionResume, by, remoteAddr, map[string]any{"dataset": dataset, "reason": reason, "pause_id": p.ID})
		return err
	})
	if errors.Is(err, ErrNotPaused) {
		return Pause{}, fmt.Errorf("%w: %s", ErrNotPaused, dataset)
	}
	if err != nil {
		return Pause{}, fmt.Errorf("audit: resume %s: %w", dataset, err)
	}
	return p, nil
}

// DatabaseNow is the database's clock: what idem.dataset_pauses, the
// leases and the audit's times are kept by.
func DatabaseNow(ctx context.Context, db Querier) (time.Time, error) {
	var t time.Time
	if err := db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("audit: the database's clock: %w", err)
	}
	return t, nil
}

// PausesInForce returns the pipeline's pauses in force now, by dataset.
func PausesInForce(ctx context.Context, db Querier, pipeline string) (map[string]Pause, error) {
	rows, err := db.Query(ctx, `SELECT `+pauseColumns+` FROM idem.dataset_pauses
		 WHERE dag_id = $1 AND resumed_at IS NULL AND (until IS NULL OR until > clock_timestamp())`, pipeline)
	if err != nil {
		return nil, fmt.Errorf("audit: pauses: %w", err)
	}
	ps, err := scanPauses(rows)
	if err != nil {
		return nil, fmt.Errorf("audit: pauses: %w", err)
	}
	out := make(map[string]Pause, len(ps))
	for _, p := range ps {
		out[p.Dataset] = p
	}
	return out, nil
}

// DatasetPauses returns the newest limit pauses of a dataset, newest first.
func DatasetPauses(ctx context.Context, db Querier, pipeline, dataset string, limit int) ([]Pause, error) {
	rows, err := db.Query(ctx, `SELECT `+pauseColumns+` FROM idem.dataset_pauses
		 WHERE dag_id = $1 AND task_id = $2 ORDER BY id DESC LIMIT $3`, pipeline, dataset, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: pauses of %s: %w", dataset, err)
	}
	ps, err := scanPauses(rows)
	if err != nil {
		return nil, fmt.Errorf("audit: pauses of %s: %w", dataset, err)
	}
	return ps, nil
}

// Cancellation is a cancelled backfill: a run (RunID) or a dataset's
// partitions From..To.
type Cancellation struct {
	ID       int64
	RunID    string
	Dataset  string
	From, To string
	By       string
	Reason   string
	At       time.Time
}

func (c Cancellation) String() string {
	return fmt.Sprintf("cancelled by %s at %s: %s", c.By, c.At.UTC().Format(time.RFC3339), c.Reason)
}

// Cancel records a cancellation (c's RunID, or its Dataset, From and To)
// and the operator action, in one transaction, and returns it as stored.
func Cancel(ctx context.Context, db Querier, pipeline string, c Cancellation, remoteAddr string) (Cancellation, error) {
	err := inTx(ctx, db, func(tx Querier) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO idem.cancellations (dag_id, run_id, task_id, from_key, to_key, cancelled_by, reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, cancelled_at`,
			pipeline, nullString(c.RunID), nullString(c.Dataset), nullString(c.From), nullString(c.To), c.By, c.Reason).Scan(&c.ID, &c.At)
		if err != nil {
			return err
		}
		if c.RunID != "" {
			// A run's cancellation covers all its datasets: none stored.
			c.Dataset = ""
		}
		detail := map[string]any{"run_id": c.RunID, "dataset": c.Dataset, "from": c.From, "to": c.To, "reason": c.Reason, "cancellation_id": c.ID}
		_, err = RecordAction(ctx, tx, pipeline, ActionCancel, c.By, remoteAddr, detail)
		return err
	})
	if err != nil {
		return Cancellation{}, fmt.Errorf("audit: cancel: %w", err)
	}
	return c, nil
}

const cancellationColumns = `id, coalesce(run_id, ''), coalesce(task_id, ''), coalesce(from_key, ''), coalesce(to_key, ''), cancelled_by, reason, cancelled_at`

// CancellationOf returns the cancellation that covers an event of dataset
// at partition of run runID published at published, or nil: one of its
// run, or one of a range holding partition made after published.
func CancellationOf(ctx context.Context, db Querier, pipeline, dataset, partition, runID string, published time.Time) (*Cancellation, error) {
	cs, err := CancellationsOf(ctx, db, []CancelQuery{{RunKey: RunKey{Pipeline: pipeline, Dataset: dataset, Partition: partition, RunID: runID}, Published: published}})
	if err != nil {
		return nil, err
	}
	return cs[0], nil
}

// CancelQuery is one event CancellationsOf asks about.
type CancelQuery struct {
	RunKey
	Published time.Time
}

// CancellationsOf is CancellationOf for several events (a group's), in one
// statement: the answer at i is qs[i]'s cancellation, or nil.
func CancellationsOf(ctx context.Context, db Querier, qs []CancelQuery) ([]*Cancellation, error) {
	type in struct {
		Ord       int       `json:"ord"`
		Pipeline  string    `json:"dag"`
		Dataset   string    `json:"task"`
		Partition string    `json:"part"`
		RunID     string    `json:"run"`
		Published time.Time `json:"published"`
	}
	rows := make([]in, len(qs))
	for i, q := range qs {
		rows[i] = in{Ord: i, Pipeline: q.Pipeline, Dataset: q.Dataset, Partition: q.Partition, RunID: q.RunID, Published: q.Published}
	}
	data, err := json.Marshal(rows)
	if err != nil {
		return nil, fmt.Errorf("audit: cancellations: %w", err)
	}
	rs, err := db.Query(ctx, `SELECT i.ord, c.* FROM jsonb_to_recordset($1::jsonb) AS i(ord int, dag text, task text, part text, run text, published timestamptz)
		CROSS JOIN LATERAL (SELECT `+cancellationColumns+` FROM idem.cancellations
		 WHERE `+coversSQL("i.dag", "i.task", "i.part", "i.run", "i.published")+`
		 ORDER BY id LIMIT 1) c`, string(data))
	if err != nil {
		return nil, fmt.Errorf("audit: cancellations: %w", err)
	}
	out := make([]*Cancellation, len(qs))
	var ord int
	var c Cancellation
	_, err = pgx.ForEachRow(rs, []any{&ord, &c.ID, &c.RunID, &c.Dataset, &c.From, &c.To, &c.By, &c.Reason, &c.At}, func() error {
		if ord < 0 || ord >= len(qs) {
			return fmt.Errorf("audit: cancellations: an answer for no event (%d)", ord)
		}
		found := c
		out[ord] = &found
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: cancellations: %w", err)
	}
	return out, nil
}

// RunCancellation returns the cancellation of run runID of dataset (by
// run, or a range cancelled after the run started, given as since), or
// nil.
func RunCancellation(ctx context.Context, db Querier, pipeline, dataset, runID string, since time.Time, from, to string) (*Cancellation, error) {
	rows, err := db.Query(ctx, `SELECT `+cancellationColumns+` FROM idem.cancellations
		 WHERE dag_id = $1 AND (run_id = $3
		       OR (run_id IS NULL AND task_id = $2 AND from_key <= $6 AND to_key >= $5 AND cancelled_at > $4))
		 ORDER BY id LIMIT 1`, pipeline, dataset, runID, since, from, to)
	if err != nil {
		return nil, fmt.Errorf("audit: cancellation: %w", err)
	}
	cs, err := scanCancellations(rows)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	return &cs[0], nil
}

func scanCancellations(rows pgx.Rows) ([]Cancellation, error) {
	var out []Cancellation
	var c Cancellation
	_, err := pgx.ForEachRow(rows, []any{&c.ID, &c.RunID, &c.Dataset, &c.From, &c.To, &c.By, &c.Reason, &c.At}, func() error {
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: cancellations: %w", err)
	}
	return out, nil
}

// RecordCancelled writes a finished `cancelled` attempt of a: its event
// was acknowledged without loading, because c covers it.
func RecordCancelled(ctx context.Context, db Querier, a Attempt, c Cancellation) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, `
		INSERT INTO idem.pipeline_audit
		       (dag_id, task_id, logical_date, partition_key, run_id, status, attempt, force, stream_seq,
		        triggered_by, attributes, error, finished_at, definition_hash)
		VALUES ($1, $2, $3, $4, $5, 'cancelled', 1, $6, $7, $8, $9, $10, clock_timestamp(), $11)
		RETURNING id`,
		a.Pipeline, a.Dataset, a.LogicalDate, a.Partition, a.RunID, a.Force, nullSeq(a.StreamSeq),
		nullString(a.TriggeredBy), nullAttrs(a.Attributes), truncate(c.String(), 4000), nullString(a.DefinitionHash)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("audit: record cancelled: %w", err)
	}
	return id, nil
}

// ParseUntil reads a pause's end: RFC 3339, or a duration from now such as
// 90m, 2h or 1d (a day is 24 h). It must be in the future.
func ParseUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !t.After(now) {
			return time.Time{}, fmt.Errorf("until %s has passed", s)
		}
		return t, nil
	}
	d, err := calendar.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("until %q: want a time (RFC 3339, e.g. 2026-12-24T08:00:00Z) or a positive duration (e.g. 30m, 2h, 1d)", s)
	}
	return now.Add(d), nil
}

// PauseOf is dataset's pause in force, or nil.
func PauseOf(ctx context.Context, db Querier, pipeline, dataset string) (*Pause, error) {
	rows, err := db.Query(ctx, `SELECT `+pauseColumns+` FROM idem.dataset_pauses
		 WHERE dag_id = $1 AND task_id = $2 AND resumed_at IS NULL AND (until IS NULL OR until > clock_timestamp())`, pipeline, dataset)
	if err != nil {
		return nil, err
	}
	ps, err := scanPauses(rows)
	if err != nil || len(ps) == 0 {
		return nil, err
	}
	return &ps[0], nil
}
