package handlers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Reasons are short, stable machine words: they name a fatal error's cause in
// dead letters, audit rows and metric labels, so they never change once shipped.
const (
	ReasonInvalidEvent        = "invalid_event"        // the event fails decoding or validation
	ReasonUnknownDataset      = "unknown_dataset"      // no dataset of that name is configured
	ReasonEmptySource         = "empty_source"         // the source returned no rows and allow_empty is false
	ReasonWallClockSQL        = "wall_clock_sql"       // the source SQL reads the clock
	ReasonConfig              = "config"               // connection string, TLS, database name, server setting
	ReasonPermissionDenied    = "permission_denied"    // grants or authentication
	ReasonUndefinedObject     = "undefined_object"     // a table, column, function, type or schema is missing
	ReasonSchemaMismatch      = "schema_mismatch"      // the objects exist but do not fit the statement
	ReasonInvalidSQL          = "invalid_sql"          // the SQL text itself is wrong, whatever the tables
	ReasonDataException       = "data_exception"       // a value is invalid for its type, or a RAISE
	ReasonConstraintViolation = "constraint_violation" // NOT NULL, unique, foreign key, check, exclusion
	ReasonDataCorrupted       = "data_corrupted"       // the server found corrupted data or indexes
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
	reason := e.Reason
	if reason == "" {
		reason = "fatal"
	}
	if e.Err == nil {
		return reason
	}
	return reason + ": " + e.Err.Error()
}

func (e *FatalError) Unwrap() error { return e.Err }

// Fatal reports true: retrying cannot help.
func (e *FatalError) Fatal() bool { return true }

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

// SQLState returns the SQLSTATE of the PostgreSQL error in err's chain, or "".
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Classify decides whether err from PostgreSQL, pgx or the network is fatal
// (returned wrapped in a *FatalError with a reason) or transient (returned
// unchanged). It is idempotent: errors already fatal come back unchanged, and so
// does context.Canceled, because shutdown is recognised by the context's cause,
// not here.
//
// A SQLSTATE decides when there is one, even inside a *pgconn.ConnectError (a
// wrong password is 28P01 there). Without one, only configuration errors are
// fatal: an unparsable connection string and a server certificate that does not
// verify. Everything else is transient, including the errors pgconn.SafeToRetry
// calls unsafe: connection refused while the server restarts, io.ErrUnexpectedEOF
// when it crashes mid-query, connection resets, net timeouts, "conn closed", and
// a bare context.DeadlineExceeded from an exhausted pool (pgconn.Timeout is false
// there). Retrying them is safe because every load is idempotent.
func Classify(err error) error {
	if err == nil || IsFatal(err) || errors.Is(err, context.Canceled) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if reason := sqlStateReason(pgErr); reason != "" {
			return Fatal(reason, err)
		}
		return err
	}
	if isConfigError(err) {
		return Fatal(ReasonConfig, err)
	}
	return err
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
	case "28":
		// Authentication. A rotated password fails every message, not only this
		// one, but it does not fix itself either: SPEC lists permission denied as
		// fatal, and dead letters can be replayed once the secret is fixed.
		return ReasonPermissionDenied
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

// isConfigError reports errors without a SQLSTATE that no retry can fix: an
// unparsable connection string and a server certificate that fails verification.
// pgx returns x509 errors bare for sslmode=verify-ca and inside a
// *tls.CertificateVerificationError for verify-full.
func isConfigError(err error) bool {
	var (
		parseErr     *pgconn.ParseConfigError
		verifyErr    *tls.CertificateVerificationError
		authorityErr x509.UnknownAuthorityError
		hostnameErr  x509.HostnameError
		invalidErr   x509.CertificateInvalidError
	)
	return errors.As(err, &parseErr) || errors.As(err, &verifyErr) ||
		errors.As(err, &authorityErr) || errors.As(err, &hostnameErr) || errors.As(err, &invalidErr)
}
