package handlers

import (
	"context"
	"errors"
	"fmt"
	"github.com/idem-data/idem/internal/pgerr"
	"strings"
	"sync"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// Reasons name a fatal error's cause in dead letters, audit rows and
// metric labels; package schemas defines them (schemas.Reason*).
const (
	ReasonInvalidEvent        = schemas.ReasonInvalidEvent
	ReasonUnknownDataset      = schemas.ReasonUnknownDataset
	ReasonEmptySource         = schemas.ReasonEmptySource
	ReasonWallClockSQL        = schemas.ReasonWallClockSQL
	ReasonConfig              = schemas.ReasonConfig
	ReasonPermissionDenied    = schemas.ReasonPermissionDenied
	ReasonUndefinedObject     = schemas.ReasonUndefinedObject
	ReasonSchemaMismatch      = schemas.ReasonSchemaMismatch
	ReasonInvalidSQL          = schemas.ReasonInvalidSQL
	ReasonDataException       = schemas.ReasonDataException
	ReasonConstraintViolation = schemas.ReasonConstraintViolation
	ReasonDataCorrupted       = schemas.ReasonDataCorrupted
)

// FatalError marks an error that will fail the same way on every attempt: the
// message goes to the dead-letter stream after one delivery.
//
// Callers outside this package detect it through its behaviour, an
// interface{ Fatal() bool } found with errors.As (see IsFatal), so they need
// not import handlers.
type FatalError struct {
	Reason string // a Reason* word
	Err    error
}

// Error returns "<reason>: <err>". For a PostgreSQL error the SQLSTATE is part of
// err's text, e.g. `undefined_object: ERROR: column "x" does not exist (SQLSTATE 42703)`.
func (e *FatalError) Error() string {
	reason := e.FatalReason()
	if e.Err == nil {
		return reason
	}
	return reason + ": " + e.Err.Error()
}

func (e *FatalError) Unwrap() error { return e.Err }

// Fatal reports true: retrying cannot help.
func (e *FatalError) Fatal() bool { return true }

// FatalReason is the word Error starts with. The dead letter keeps it in a
// header of its own, so operators select dead letters by reason without
// parsing error text.
func (e *FatalError) FatalReason() string {
	if e.Reason == "" {
		return schemas.ReasonFatal
	}
	return e.Reason
}

// Fatal marks err as fatal for reason. A nil err gives nil, so it can wrap a
// call's result directly.
func Fatal(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &FatalError{Reason: reason, Err: err}
}

// IsFatal reports whether err, or an error it wraps, says Fatal() == true.
// Anything unclassified is transient: retrying is bounded by the retry budget,
// while a wrong "fatal" loses the retries that would have succeeded.
func IsFatal(err error) bool {
	var f interface{ Fatal() bool }
	return errors.As(err, &f) && f.Fatal()
}

// UnavailableError marks an error that says the warehouse cannot be used at
// all (cannot connect, authentication refused at connect, an administrator
// shut the server down, too many connections, a read-only server after a
// failover): the environment is failing, not the event. The consumer holds
// its messages and probes instead of spending their retry budget.
//
// Callers outside this package detect it through its behaviour, an
// interface{ Unavailable() bool } found with errors.As.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return "warehouse unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable reports true.
func (e *UnavailableError) Unavailable() bool { return true }

// IsUnavailable reports whether err, or an error it wraps, says
// Unavailable() == true.
func IsUnavailable(err error) bool {
	var u interface{ Unavailable() bool }
	return errors.As(err, &u) && u.Unavailable()
}

// AttemptError is the error of a load that ran: N is its number among the
// loads of the same message (the audit's attempt column), which the consumer
// sets against the message's budget.
type AttemptError struct {
	N   int
	Err error
}

func (e *AttemptError) Error() string { return e.Err.Error() }
func (e *AttemptError) Unwrap() error { return e.Err }

// Attempt is the attempt's number, from 1.
func (e *AttemptError) Attempt() int { return e.N }

// PausedError says the statement that begins an attempt found the dataset
// paused: it wrote nothing, no load ran, and the message goes back for
// later, spending no attempt. The replica's own reading of the pauses
// holds messages before they get that far; this is the database's answer
// when that reading was stale.
type PausedError struct{ Dataset string }

func (e *PausedError) Error() string {
	return "dataset " + e.Dataset + " is paused: no attempt began"
}

// DatasetPaused reports true.
func (e *PausedError) DatasetPaused() bool { return true }

// BudgetSpentError says a message's loads already ran as many times as its
// budget allows: this delivery ran nothing. It happens when the last allowed
// attempt ended without a verdict (LastDied: the process died in it) or its
// dead letter could not be published.
type BudgetSpentError struct {
	Attempts int
	LastDied bool
}

func (e *BudgetSpentError) Error() string {
	if e.LastDied {
		return fmt.Sprintf("%d attempts ran and the last one never finished (the process died during the load): "+
			"not loading again", e.Attempts)
	}
	return fmt.Sprintf("%d attempts ran and failed: not loading again", e.Attempts)
}

// Attempt is the number of attempts that ran.
func (e *BudgetSpentError) Attempt() int { return e.Attempts }

// Crashed reports that the last attempt died without a verdict.
func (e *BudgetSpentError) Crashed() bool { return e.LastDied }

// BudgetSpent reports true: the consumer dead-letters without retrying.
func (e *BudgetSpentError) BudgetSpent() bool { return true }

// classifyBeforeLoad classifies an error met before any load ran (the ledger check
// and the `started` row): a fatal error stays fatal, and any other means the
// warehouse cannot even record an attempt, which is not the event's fault.
func classifyBeforeLoad(err error) error {
	err = Classify(err)
	if err == nil || IsFatal(err) || IsUnavailable(err) || errors.Is(err, context.Canceled) {
		return err
	}
	return &UnavailableError{Err: err}
}

// SQLState returns the SQLSTATE of the PostgreSQL error in err's chain, or "".
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Classify decides whether err from PostgreSQL, pgx or the network is fatal
// (wrapped in a *FatalError with a reason), says the warehouse is unavailable
// (wrapped in an *UnavailableError), or is transient (returned unchanged). It
// is idempotent: classified errors come back unchanged, and so does
// context.Canceled, because shutdown is recognised by the context's cause.
//
// A SQLSTATE decides when there is one, even inside a *pgconn.ConnectError (a
// wrong password is 28P01 there, unavailable; a missing database 3D000,
// fatal). Without one, configuration errors are fatal (an unparsable
// connection string, a server certificate that does not verify) and a
// failure to connect at all is unavailable. Everything else is transient,
// including the errors of a connection lost mid-load: io.ErrUnexpectedEOF when
// the server crashes mid-query, connection resets, net timeouts, "conn
// closed". That load ran, so it counts against the budget; the next attempt's
// connect tells whether the warehouse is gone. When the warehouse cannot
// even record the failure, the handler holds the message and decides once
// it answers (Handler.failed, audit.FailAfterOutage): a warehouse that
// restarted under the load makes it `unavailable`. Retrying is safe because
// every load is idempotent.
func Classify(err error) error {
	if err == nil || IsFatal(err) || IsUnavailable(err) || errors.Is(err, context.Canceled) {
		return err
	}
	var stale *strategies.StaleCatalogError
	if errors.As(err, &stale) {
		// A description cached by an earlier load went stale: the next
		// attempt reads the catalog again, and only then is a schema error
		// the dataset's fault.
		return err
	}
	if r := Refusal(err); r != nil {
		// A login refused (a rotated password, a dropped database) stops
		// every load until a person fixes a setting: an outage, never
		// the event's fault.
		return &UnavailableError{Err: r}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if unavailableState(pgErr.Code) {
			return &UnavailableError{Err: err}
		}
		if reason := sqlStateReason(pgErr); reason != "" {
			return Fatal(reason, err)
		}
		return err
	}
	if isConfigError(err) {
		return Fatal(ReasonConfig, err)
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		// Refused, reset, DNS, a connect timeout: no session at all.
		return &UnavailableError{Err: err}
	}
	return err
}

// unavailableState reports the SQLSTATEs that say the server as a whole
// cannot be used now, whatever the statement: authentication (a rotated
// password), connection exceptions, too many connections, a read-only server
// after a failover, a full disk, and an administrator's or crash shutdown, or
// a server starting up.
func unavailableState(code string) bool {
	switch code {
	case pgerrcode.TooManyConnections, pgerrcode.ReadOnlySQLTransaction, pgerrcode.DiskFull,
		pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow:
		return true
	}
	return strings.HasPrefix(code, "28") || strings.HasPrefix(code, "08")
}

// routineRevalidateCachedQuery is the server function that raises 0A000 "cached
// plan must not change result type" when a table changed under a prepared
// statement. pgx drops the statement from its cache on any error, so the next
// attempt succeeds. The routine name is not translated, unlike the message.
const routineRevalidateCachedQuery = "RevalidateCachedQuery"

// sqlStateReason maps a PostgreSQL error to a fatal reason, or "" for transient.
// Codes come first, then the class (the first two characters), so that a class
// rule never hides an exception listed for one of its codes.
func sqlStateReason(e *pgconn.PgError) string {
	code := e.Code
	switch code {
	case pgerrcode.FeatureNotSupported:
		if e.Routine == routineRevalidateCachedQuery {
			return ""
		}
		return ReasonSchemaMismatch
	case pgerrcode.ObjectInUse, pgerrcode.LockNotAvailable: // class 55 is fatal otherwise
		return ""
	case pgerrcode.InvalidCatalogName, pgerrcode.DatabaseDropped, pgerrcode.CantChangeRuntimeParam:
		return ReasonConfig
	case pgerrcode.InsufficientPrivilege:
		return ReasonPermissionDenied
	case pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn, pgerrcode.UndefinedFunction,
		pgerrcode.UndefinedObject, pgerrcode.InvalidSchemaName:
		return ReasonUndefinedObject
	case pgerrcode.SyntaxError, pgerrcode.UndefinedParameter, pgerrcode.AmbiguousParameter,
		pgerrcode.IndeterminateDatatype, pgerrcode.GroupingError, pgerrcode.WindowingError,
		pgerrcode.InvalidRecursion:
		return ReasonInvalidSQL
	case pgerrcode.DataCorrupted, pgerrcode.IndexCorrupted:
		return ReasonDataCorrupted
	}
	if len(code) != 5 {
		return ""
	}
	switch code[:2] {
	case "21", "22", "P0": // cardinality, data exception, PL/pgSQL RAISE and friends
		return ReasonDataException
	case "23", "44": // integrity constraint, WITH CHECK OPTION
		return ReasonConstraintViolation
	case "42", "55": // other syntax/access rule errors; object not in prerequisite state
		return ReasonSchemaMismatch
	case "08", "25", "40", "53", "54", "57", "58", "72", "XX":
		// Connection; transaction state (idle-in-transaction and transaction
		// timeouts, read-only after a failover, in failed transaction);
		// rollback (serialization, deadlock); resources; program limits (also
		// the xid wraparound stop); operator intervention (statement timeout,
		// shutdown); system errors; snapshot too old; internal errors.
		return ""
	}
	return "" // unknown codes retry: the retry budget bounds them
}

// isConfigError: see pgerr.IsConfigError.
func isConfigError(err error) bool { return pgerr.IsConfigError(err) }

// unrecorded keeps the failures of attempts whose audit row could not be
// written at the time, so it is written before the next attempt: a row
// left `started` would otherwise count as a crash against the message's
// budget, and tell an operator nothing.
type unrecorded struct {
	mu       sync.Mutex
	failures []failure
}

// failure is one kept failure. A transient one's kind is decided when it
// is written (audit.FailAfterOutage): unavailable when the warehouse
// restarted under the attempt.
type failure struct {
	id   int64
	err  error
	kind string
}

// maxUnrecorded bounds the memory kept for unwritten failures; beyond it the
// oldest are forgotten, and their rows count as crashes.
const maxUnrecorded = 10_000

func (u *unrecorded) add(f failure) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.failures) >= maxUnrecorded {
		u.failures = u.failures[1:]
	}
	u.failures = append(u.failures, f)
}

// flush writes the kept failures; those that still cannot be written stay.
func (u *unrecorded) flush(ctx context.Context, db audit.Querier, log zerolog.Logger) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for len(u.failures) > 0 {
		f := u.failures[0]
		kind := f.kind
		var err error
		if f.kind == audit.KindTransient {
			kind, err = audit.FailAfterOutage(ctx, db, f.id, f.err)
		} else {
			err = audit.Fail(ctx, db, f.id, f.err, f.kind)
		}
		if err != nil {
			return
		}
		log.Debug().Int64("audit_id", f.id).Str("error_kind", kind).Msg("recorded the failure of an earlier attempt")
		u.failures = u.failures[1:]
	}
}
