package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
)

// What stands between idem and PostgreSQL, found when idem connects.
const (
	// PoolerNone: idem talks to PostgreSQL itself (or through a TCP proxy
	// such as HAProxy, which hands the session through whole).
	PoolerNone = ""
	// PoolerTransaction: a pooler that moves a client connection between
	// server connections from one transaction to the next (PgBouncer's
	// pool_mode = transaction, RDS Proxy, Supavisor, PgCat).
	PoolerTransaction = "transaction"
	// PoolerSession: a pooler that gave this client connection one server
	// connection for as long as it stays open (pool_mode = session), as far
	// as the check could tell.
	PoolerSession = "session"
)

// Route is what idem found between itself and PostgreSQL, and how it sends
// statements there.
type Route struct {
	// Pooler is PoolerNone, PoolerTransaction or PoolerSession.
	Pooler string
	// StatementMode is the postgres.statement_mode in force (auto resolved).
	StatementMode string
	// Auto says StatementMode was picked by auto.
	Auto bool
}

// Pooled says a pooler stands in front of PostgreSQL.
func (r Route) Pooled() bool { return r.Pooler != PoolerNone }

func (r Route) String() string {
	where := "PostgreSQL directly"
	switch r.Pooler {
	case PoolerTransaction:
		where = "a transaction pooler (each transaction may run on another server connection)"
	case PoolerSession:
		where = "a session pooler"
	}
	how := r.StatementMode
	if r.Auto {
		how += " (auto)"
	}
	return where + ", statements: " + how
}

// execMode is pgx's name for a statement mode.
func execMode(mode string) pgx.QueryExecMode {
	if mode == config.StatementDescribe {
		return pgx.QueryExecModeCacheDescribe
	}
	return pgx.QueryExecModeCacheStatement
}

// resolve settles postgres.statement_mode for what was found: auto prepares
// named statements against PostgreSQL itself (they are cached per session,
// and the session is idem's) and sends unnamed ones, whose description
// pgx caches, behind any pooler: a named statement lives on one server
// connection, which a transaction pooler hands to other clients.
func (r Route) resolve(mode string) Route {
	if mode == "" || mode == config.StatementAuto {
		r.Auto, r.StatementMode = true, config.StatementPrepare
		if r.Pooled() {
			r.StatementMode = config.StatementDescribe
		}
		return r
	}
	r.StatementMode = mode
	return r
}

// statementPooling is how a statement pooler (PgBouncer's pool_mode =
// statement) answers a transaction of more than one statement: it cannot
// run idem's loads at all.
func statementPooling(err error) error {
	return &handlers.RefusedError{Err: err,
		Cause: "the pooler in front of PostgreSQL runs statement pooling, which cannot run a transaction of more than one statement",
		Fix:   "set pool_mode = transaction (or session) for idem's database in the pooler"}
}

// DetectRoute finds what stands between idem and the server cc names, on
// connections of its own that send nothing a pooler refuses and leave no
// state behind (simple protocol, no prepared statement).
//
// A pooler answers the login itself: the process id it gives the client
// (BackendKeyData, for cancel requests) is not the server backend's, which
// pg_backend_pid() reports. PostgreSQL, and a TCP proxy in front of it,
// give the backend's own. Behind a pooler, a second client connection that
// holds a transaction open takes a server connection; when it is the one the
// first client just used, or the first client's next transaction runs on
// another, or the second client's own transactions run on different ones,
// client connections move between server connections: transaction pooling.
// A transaction of two statements fails under statement pooling.
func DetectRoute(ctx context.Context, cc *pgx.ConnConfig) (Route, error) {
	probe := cc.Copy()
	probe.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	probe.AfterConnect = nil
	a, err := pgx.ConnectConfig(ctx, probe)
	if err != nil {
		return Route{}, err
	}
	defer func() { _ = a.Close(context.WithoutCancel(ctx)) }()
	first, err := backendPID(ctx, a)
	if err != nil {
		return Route{}, err
	}
	if a.PgConn().PID() == first {
		return Route{Pooler: PoolerNone}, nil
	}
	if err := pgx.BeginFunc(ctx, a, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT 2")
		return err
	}); err != nil {
		if isStatementPooling(err) {
			return Route{}, statementPooling(err)
		}
		return Route{}, fmt.Errorf("checking the pooler: %w", err)
	}
	b, err := pgx.ConnectConfig(ctx, probe)
	if err != nil {
		return Route{}, err
	}
	defer func() { _ = b.Close(context.WithoutCancel(ctx)) }()
	// A session pooler never shows it; a transaction pooler shows it in
	// most rounds, but other clients at work (a second replica starting)
	// can hand the two connections other server connections than these,
	// so a round that shows nothing proves nothing: it asks again, after a
	// pause that grows, so that it does not keep step with their work. The
	// second connection's own transactions moving between server
	// connections shows it too; such clients make that likely.
	var lastHeld uint32 // the server connection b held in the round before
	for round := range poolerRounds {
		if round > 0 && !sleep(ctx, time.Duration(round)*time.Millisecond) {
			return Route{}, ctx.Err()
		}
		moved := false
		err = pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
			held, err := backendPID(ctx, tx)
			if err != nil {
				return err
			}
			again, err := backendPID(ctx, a)
			if err != nil {
				return err
			}
			moved = held == first || again != first || (lastHeld != 0 && held != lastHeld)
			lastHeld = held
			return nil
		})
		if err != nil {
			return Route{}, fmt.Errorf("checking the pooler: %w", err)
		}
		if moved {
			return Route{Pooler: PoolerTransaction}, nil
		}
	}
	return Route{Pooler: PoolerSession}, nil
}

// poolerRounds is how many times DetectRoute looks for a client connection
// moving between server connections before it calls the pooler a session
// pooler: some 0.5 s in all behind a session pooler, which never shows one.
const poolerRounds = 32

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func backendPID(ctx context.Context, q queryRower) (uint32, error) {
	var pid uint32
	err := q.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	return pid, err
}

// isStatementPooling recognises PgBouncer's refusal of a transaction block in
// pool_mode = statement.
func isStatementPooling(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Message, "statement pooling")
}

// statementModeOf names pgx's mode as postgres.statement_mode does.
func statementModeOf(m pgx.QueryExecMode) string {
	switch m {
	case pgx.QueryExecModeCacheStatement:
		return config.StatementPrepare
	case pgx.QueryExecModeCacheDescribe:
		return config.StatementDescribe
	}
	return m.String()
}

// logRoute says once, at start, what idem found in front of PostgreSQL.
func logRoute(log zerolog.Logger, r Route) {
	ev := log.Info()
	if r.Pooled() {
		ev = ev.Str("pooler", r.Pooler)
	}
	ev.Str("statement_mode", r.StatementMode).Bool("statement_mode_auto", r.Auto).
		Msg("postgres: connected to " + r.String())
}
