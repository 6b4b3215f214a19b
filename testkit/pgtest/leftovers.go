package pgtest

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/internal/localpg"
)

// PoolerTrackedSettings are the parameters pgbouncer (1.18) carries from a
// client's startup packet to whichever server connection serves it: when
// the server connection holds other values, pgbouncer SETs them before the
// client's first query, so they show as source 'session' without anyone
// having run SET. They are also the only startup parameters it accepts
// (any other is FATAL "unsupported startup parameter", unless listed in
// ignore_startup_parameters). Names as pg_settings spells them.
var PoolerTrackedSettings = []string{"application_name", "client_encoding", "DateStyle", "TimeZone", "standard_conforming_strings"}

// SessionLeftovers reports what earlier clients left on the server
// connections behind pooledURL: it opens n client connections (simple
// protocol, so the probes prepare nothing), BEGINs on each and holds them
// all, so that in transaction mode each sits on a server connection of its
// own (the idle ones first, then new ones), and asks each backend for
// session state it has no business carrying: advisory locks it holds,
// settings SET for the session (PoolerTrackedSettings aside), prepared
// statements, temporary relations, LISTEN channels and open cursors. Each
// finding reads "backend 1234: ...". None means the n server connections
// it saw are clean.
//
// n must not exceed the pool's size (default_pool_size, 20 by default):
// the n+1st BEGIN would wait for a server connection that none of the
// others gives back. In statement mode BEGIN is refused, so it reports an
// error there.
func SessionLeftovers(ctx context.Context, pooledURL string, n int) ([]string, error) {
	conns := make([]*pgx.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	for range n {
		c, err := localpg.ConnectSimple(ctx, pooledURL)
		if err != nil {
			return nil, fmt.Errorf("session leftovers: connect: %w", err)
		}
		conns = append(conns, c)
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			return nil, fmt.Errorf("session leftovers: begin: %w", err)
		}
	}
	var findings []string
	for _, c := range conns {
		f, err := backendLeftovers(ctx, c)
		if err != nil {
			return nil, err
		}
		findings = append(findings, f...)
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			return nil, fmt.Errorf("session leftovers: rollback: %w", err)
		}
	}
	return findings, nil
}

// leftoverProbes name what a backend carries past its client, one query
// each, returning one text per item.
var leftoverProbes = []struct{ what, sql string }{
	{"advisory lock", `SELECT CASE WHEN objsubid = 1 THEN ((classid::bigint << 32) | objid::bigint)::text
	        ELSE '(' || classid || ', ' || objid || ')' END || ' ' || mode
	   FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY 1`},
	{"session setting", `SELECT name || ' = ' || setting FROM pg_settings
	   WHERE source = 'session' AND name <> ALL ($1::text[]) ORDER BY name`},
	{"prepared statement", `SELECT name || ': ' || statement FROM pg_prepared_statements ORDER BY name`},
	{"temporary relation", `SELECT relname || ' (relkind ' || relkind::text || ')' FROM pg_class
	   WHERE relnamespace = pg_my_temp_schema() AND relkind NOT IN ('i', 'I', 't') ORDER BY relname`},
	{"LISTEN channel", `SELECT c FROM pg_listening_channels() c ORDER BY c`},
	{"cursor", `SELECT name || ': ' || statement FROM pg_cursors ORDER BY name`},
}

func backendLeftovers(ctx context.Context, c *pgx.Conn) ([]string, error) {
	var pid int
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return nil, fmt.Errorf("session leftovers: %w", err)
	}
	var findings []string
	for _, p := range leftoverProbes {
		var args []any
		if p.what == "session setting" {
			args = []any{PoolerTrackedSettings}
		}
		items, err := texts(ctx, c, p.sql, args...)
		if err != nil {
			return nil, fmt.Errorf("session leftovers: %s: %w", p.what, err)
		}
		for _, it := range items {
			findings = append(findings, fmt.Sprintf("backend %d: %s %s", pid, p.what, it))
		}
	}
	return findings, nil
}

// IdleAdvisoryLocks reports, from a direct connection to adminURL, the
// advisory locks held by backends that are idle (no transaction open):
// only a session-level lock survives its transaction, and behind a
// transaction pooler one on an idle backend belongs to no client any more.
// db limits it to one database; empty means every database. Each finding
// reads "backend 1234 (db x): advisory lock 42 ExclusiveLock".
func IdleAdvisoryLocks(ctx context.Context, adminURL, db string) ([]string, error) {
	c, err := localpg.ConnectSimple(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("idle advisory locks: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	return texts(ctx, c, `
	SELECT 'backend ' || a.pid || ' (db ' || a.datname || '): advisory lock '
	       || CASE WHEN l.objsubid = 1 THEN ((l.classid::bigint << 32) | l.objid::bigint)::text
	               ELSE '(' || l.classid || ', ' || l.objid || ')' END || ' ' || l.mode
	  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	 WHERE l.locktype = 'advisory' AND l.granted AND a.state = 'idle'
	   AND ($1 = '' OR a.datname = $1)
	 ORDER BY 1`, db)
}

func texts(ctx context.Context, c *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
