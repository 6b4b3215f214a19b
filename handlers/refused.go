package handlers

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// RefusedError is a connection that PostgreSQL, or a pooler in front of it,
// answered and refused: a wrong password, a role without LOGIN, a database
// that does not exist, a startup parameter the pooler does not accept. No
// retry fixes it; a person changes a setting. At start idem exits with it;
// once running it is an outage with this reason (a rotated password), and
// the warehouse circuit probes until the setting is fixed.
type RefusedError struct {
	// Cause says who refused what, in the user's words.
	Cause string
	// Fix names the setting to change.
	Fix string
	// Err is the server's error.
	Err error
}

func (e *RefusedError) Error() string {
	return e.Cause + ": " + e.Fix + " (" + e.Err.Error() + ")"
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Unavailable reports true: while a login is refused, no load can run, and
// that is not the event's fault.
func (e *RefusedError) Unavailable() bool { return true }

// IsRefused reports whether err is, or wraps, a refused connection.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// Refusal returns err as a *RefusedError when it is a connection the server
// answered with a refusal that no retry fixes (SQLSTATE 28000, 28P01,
// 3D000, or 42501 at connect; 08P01 for a startup parameter a pooler does
// not take, statement pooling, or a database the pooler does not know), and
// nil otherwise. Connection refused, 57P03 (starting up), 53300 (too many
// connections), a pooler's other 08P01 (its server unreachable, its pool
// full) and timeouts are not refusals: they pass.
func Refusal(err error) *RefusedError {
	var r *RefusedError
	if errors.As(err, &r) {
		return r
	}
	var connectErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	if !errors.As(err, &connectErr) || !errors.As(err, &pgErr) {
		return nil
	}
	user, db, addr := "", "", ""
	if c := connectErr.Config; c != nil {
		user, db, addr = c.User, c.Database, fmt.Sprintf(" at %s:%d", c.Host, c.Port)
	}
	at, pooler := "the server"+addr, "the pooler"+addr
	msg := pgErr.Message
	switch pgErr.Code {
	case pgerrcode.ProtocolViolation:
		if p, ok := strings.CutPrefix(msg, "unsupported startup parameter: "); ok {
			fix := fmt.Sprintf("remove %s from postgres.url, or add it to the pooler's ignore_startup_parameters", p)
			if p == "jit" || p == "synchronous_commit" {
				// idem's own: sent only where it found PostgreSQL itself
				// when it connected first.
				fix = "a pooler now stands where idem found PostgreSQL itself at start: restart idem so that it finds the pooler and sends only what poolers accept"
			}
			return &RefusedError{Err: err, Cause: fmt.Sprintf("%s refused startup parameter %s", pooler, p), Fix: fix}
		}
		if strings.Contains(msg, "statement pooling") {
			return &RefusedError{Err: err, Cause: pooler + " runs statement pooling, which cannot run a transaction of more than one statement",
				Fix: "set pool_mode = transaction (or session) for this database in the pooler"}
		}
		if strings.HasPrefix(msg, "no such database") {
			return &RefusedError{Err: err, Cause: fmt.Sprintf("%s knows no database %q", pooler, db),
				Fix: "add it to the pooler's [databases] section, or fix the database name in postgres.url"}
		}
		// Anything else a pooler says with 08P01 passes: its server is
		// down or starting (server_login_retry), its pool is full
		// (max_client_conn, query_wait_timeout).
		return nil
	case pgerrcode.InvalidPassword:
		return &RefusedError{Err: err, Cause: fmt.Sprintf("%s refused the login of %s: password authentication failed", at, user),
			Fix: "set the role's current password in postgres.url (or the file or secret it is read from)"}
	case pgerrcode.InvalidAuthorizationSpecification:
		return &RefusedError{Err: err, Cause: fmt.Sprintf("%s refused the login of %s: %s", at, user, msg),
			Fix: fmt.Sprintf("give the role LOGIN (ALTER ROLE %s LOGIN), or allow it in pg_hba.conf (or the pooler's auth_file)", user)}
	case pgerrcode.InvalidCatalogName:
		return &RefusedError{Err: err, Cause: fmt.Sprintf("%s has no database %q", at, db),
			Fix: "create it, or fix the database name in postgres.url"}
	case pgerrcode.InsufficientPrivilege:
		return &RefusedError{Err: err, Cause: fmt.Sprintf("%s refused the login of %s: %s", at, user, msg),
			Fix: fmt.Sprintf("GRANT CONNECT ON DATABASE %s TO %s", db, user)}
	}
	if strings.HasPrefix(pgErr.Code, "28") {
		return &RefusedError{Err: err, Cause: fmt.Sprintf("%s refused the login of %s: %s", at, user, msg),
			Fix: "check the role and its credentials in postgres.url"}
	}
	return nil
}
