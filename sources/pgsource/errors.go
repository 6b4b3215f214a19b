package pgsource

import (
	"context"
	"errors"
	"fmt"
	"github.com/idem-data/idem/internal/pgerr"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Reasons name a fatal error's cause in dead letters, audit rows and metric
// labels (FatalReason): short, stable words that never change once shipped.
// They say "source" so that an operator looks at the source database, not
// the warehouse.
const (
	ReasonSourceConfig     = "source_config"            // the Spec, the URL, a missing database, TLS
	ReasonWallClockSQL     = "wall_clock_sql"           // the source SQL reads the clock (the word handlers uses for SQL sources)
	ReasonSourceSQL        = "source_sql"               // the query's text or objects: syntax, missing table or column, a write
	ReasonSourcePermission = "source_permission_denied" // grants on the source
	ReasonSourceData       = "source_data"              // a value invalid for its type, e.g. a partition that is not a date
	ReasonRecoveryConflict = "source_recovery_conflict" // the standby kept cancelling the query
	ReasonInvalidPartition = "invalid_event"            // a partition or run_id no text can hold (the word schemas uses)
)

// Kind is how a source failure behaves.
type Kind int

const (
	// KindTransient may succeed if the load runs again: a connection lost
	// mid-copy, a statement timeout, an unknown error.
	KindTransient Kind = iota
	// KindUnavailable says the source cannot be used at all now (refused,
	// unreachable, shutting down, too many connections, login refused): the
	// environment is failing, not the event. Retrying is right; it is
	// transient.
	KindUnavailable
	// KindFatal fails the same way every time: the query, the grants or the
	// URL must change.
	KindFatal
)

func (k Kind) String() string {
	switch k {
	case KindUnavailable:
		return "unavailable"
	case KindFatal:
		return "fatal"
	}
	return "transient"
}

// Error is a failure of the source database, classified by Kind.
//
// It deliberately does not wrap the *pgconn.PgError or *pgconn.ConnectError
// it came from: a caller that classifies errors by SQLSTATE for the
// warehouse (handlers.Classify) would read the source's "connection
// refused" as the warehouse's outage. The SQLSTATE is kept in SQLState, and
// the driver's message, with any password scrubbed, in Message.
type Error struct {
	Kind     Kind
	Reason   string // a Reason* word when Kind is KindFatal
	Source   string // Spec.Addr: host:port/database, never the URL
	Op       string // what failed: connect, gate, snapshot, copy, fingerprint
	SQLState string // the source's SQLSTATE, or ""
	Message  string
}

func (e *Error) Error() string {
	s := "pgsource: " + e.Op + " on " + e.Source
	switch e.Kind {
	case KindUnavailable:
		s += " (source unavailable)"
	case KindFatal:
		s = e.Reason + ": " + s
	}
	return s + ": " + e.Message
}

// Fatal reports whether retrying cannot help.
func (e *Error) Fatal() bool { return e.Kind == KindFatal }

// FatalReason is the Reason of a fatal error, "" otherwise.
func (e *Error) FatalReason() string {
	if e.Kind != KindFatal {
		return ""
	}
	return e.Reason
}

// SourceUnavailable reports whether the source cannot be used at all now.
// It is not named Unavailable on purpose: the consumer holds messages on
// Unavailable() for the warehouse's circuit, which a source outage must not
// open.
func (e *Error) SourceUnavailable() bool { return e.Kind == KindUnavailable }

// LagError says a standby's replay is further behind its primary than
// Spec.MaxReplicaLag: the partition's rows may not be there yet. It is a
// wait, not a failure: the caller holds the message (NotReady) and tries
// again later without spending an attempt. Nothing was read or written.
type LagError struct {
	Source string        // Spec.Addr
	Lag    time.Duration // now() - pg_last_xact_replay_timestamp() on the standby; -1 when no transaction was replayed yet
	Limit  time.Duration // Spec.MaxReplicaLag
	// ReplayedAt is the primary's commit time of the last transaction the
	// standby replayed (zero when there is none).
	ReplayedAt time.Time
}

func (e *LagError) Error() string {
	lag := "by an unknown time (no transaction replayed since it started)"
	if e.Lag >= 0 {
		lag = "by " + e.Lag.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("pgsource: the standby %s lags behind its primary %s, more than max_replica_lag %s: waiting for its replay",
		e.Source, lag, e.Limit)
}

// NotReady reports true: the partition is not readable yet, which is a
// wait, never a failure.
func (e *LagError) NotReady() bool { return true }

// RetryAfter is how long to wait before trying again: the excess lag,
// between one second and one minute.
func (e *LagError) RetryAfter() time.Duration {
	d := e.Lag - e.Limit
	if e.Lag < 0 {
		d = e.Limit
	}
	return min(max(d, time.Second), time.Minute)
}

// RecoveryConflictError says the standby cancelled the source query for a
// recovery conflict (replaying a change that removed rows its snapshot
// still needed, or that needed a lock it held) more often than
// Spec.RecoveryConflictRetries allows. Copy retries below that budget
// itself; past it the error is fatal, because only the standby's settings
// can fix it.
type RecoveryConflictError struct {
	Source   string // Spec.Addr
	Attempts int    // how many times the query ran and was cancelled
	SQLState string // 40001, or 40P01 for a buffer-pin deadlock with replay
	Message  string // the last cancellation's message and detail
}

func (e *RecoveryConflictError) Error() string {
	return fmt.Sprintf("%s: pgsource: the standby %s cancelled the source query %d time(s) for a conflict with recovery (%s); "+
		"set hot_standby_feedback = on on the standby, or raise max_standby_streaming_delay",
		ReasonRecoveryConflict, e.Source, e.Attempts, e.Message)
}

// Fatal reports true: the retries are spent.
func (e *RecoveryConflictError) Fatal() bool { return true }

// FatalReason is ReasonRecoveryConflict.
func (e *RecoveryConflictError) FatalReason() string { return ReasonRecoveryConflict }

// isRecoveryConflict reports the errors a standby raises when replay
// cancels a query or ends a session: SQLSTATE 40001 ("canceling statement
// due to conflict with recovery"; also the FATAL "terminating connection"
// form) and 40P01 for a buffer-pin deadlock with the startup process. In a
// READ ONLY transaction nothing else raises them, so the code decides, not
// the (translatable) message.
func isRecoveryConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) &&
		(pgErr.Code == pgerrcode.SerializationFailure || pgErr.Code == pgerrcode.DeadlockDetected)
}

// classify turns an error of the source's driver into an *Error, its text
// scrubbed of secret. A cancelled ctx wins: its error is returned wrapped,
// so errors.Is(err, context.Canceled) holds. This package's own errors come
// back unchanged.
func classify(ctx context.Context, err error, addr, op, secret string) error {
	var (
		classified *Error
		lagErr     *LagError
		conflict   *RecoveryConflictError
		partErr    *PartitionError
		specErr    *SpecError
	)
	switch {
	case err == nil, errors.As(err, &classified), errors.As(err, &lagErr), errors.As(err, &conflict),
		errors.As(err, &partErr), errors.As(err, &specErr):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("pgsource: %s on %s: %w", op, addr, ctx.Err())
	}
	e := &Error{Source: addr, Op: op}
	var (
		pgErr    *pgconn.PgError
		parseErr *pgconn.ParseConfigError
	)
	switch {
	case errors.As(err, &parseErr):
		// Its text repeats the URL, redacted only on a best-effort basis.
		e.Message, e.Kind, e.Reason = "cannot parse the URL: "+parseProblem(err), KindFatal, ReasonSourceConfig
	case errors.As(err, &pgErr):
		e.SQLState = pgErr.Code
		e.Message = pgErr.Error()
		if pgErr.Detail != "" {
			e.Message += "; " + pgErr.Detail
		}
		if pgErr.Hint != "" {
			e.Message += "; hint: " + pgErr.Hint
		}
		e.Kind, e.Reason = stateKind(pgErr.Code)
	case isConfigError(err):
		e.Message, e.Kind, e.Reason = err.Error(), KindFatal, ReasonSourceConfig
	default:
		e.Message = err.Error()
		var connectErr *pgconn.ConnectError
		if errors.As(err, &connectErr) {
			e.Kind = KindUnavailable // refused, reset, DNS, a connect timeout
		}
	}
	e.Message = scrubSecret(e.Message, secret)
	return e
}

// stateKind maps a source SQLSTATE to a Kind and, for fatal ones, a reason.
// Codes come first, then classes. Unknown codes are transient: the retry
// budget bounds them, while a wrong "fatal" loses retries that would have
// succeeded.
func stateKind(code string) (Kind, string) {
	switch code {
	case pgerrcode.TooManyConnections, pgerrcode.AdminShutdown, pgerrcode.CrashShutdown,
		pgerrcode.CannotConnectNow, pgerrcode.DiskFull, pgerrcode.OutOfMemory:
		return KindUnavailable, ""
	case pgerrcode.InvalidCatalogName, pgerrcode.DatabaseDropped:
		return KindFatal, ReasonSourceConfig
	case pgerrcode.InsufficientPrivilege:
		return KindFatal, ReasonSourcePermission
	case pgerrcode.ReadOnlySQLTransaction, pgerrcode.FeatureNotSupported, pgerrcode.InvalidSchemaName:
		// The query writes (a function it calls), or asks what COPY cannot do.
		return KindFatal, ReasonSourceSQL
	}
	if len(code) != 5 {
		return KindTransient, ""
	}
	switch code[:2] {
	case "08", "28": // connection exceptions; authentication (a rotated password)
		return KindUnavailable, ""
	case "42": // syntax, undefined table or column, type mismatch
		return KindFatal, ReasonSourceSQL
	case "21", "22", "P0": // cardinality, data exceptions, a RAISE in a function
		return KindFatal, ReasonSourceData
	}
	return KindTransient, ""
}

// isConfigError: see pgerr.IsConfigError.
func isConfigError(err error) bool { return pgerr.IsConfigError(err) }

// conflictMessage is the text a recovery conflict reports, scrubbed.
func conflictMessage(err error, secret string) (code, msg string) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", scrubSecret(err.Error(), secret)
	}
	msg = pgErr.Message
	if pgErr.Detail != "" {
		msg += ": " + strings.TrimSuffix(pgErr.Detail, ".")
	}
	return pgErr.Code, scrubSecret(msg, secret)
}
