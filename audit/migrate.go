package audit

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one embedded, numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the embedded migrations in order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %q: want NNN_name.sql", e.Name())
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %d_%s: versions must run 1, 2, 3 ... without gaps", m.Version, m.Name)
		}
	}
	return out, nil
}

// migrateLockKey serialises concurrent `idem migrate` runs (and replicas
// starting together) on one database.
const migrateLockKey = 0x6964656d // "idem"

// Migrate creates or upgrades schema idem. It is idempotent and safe to run from
// several processes at once: it applies the missing migrations in one
// transaction under an advisory lock, and returns the versions it applied.
func Migrate(ctx context.Context, conn interface {
	Begin(context.Context) (pgx.Tx, error)
}) ([]Migration, error) {
	all, err := Migrations()
	if err != nil {
		return nil, err
	}
	var applied []Migration
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			CREATE SCHEMA IF NOT EXISTS idem;
			CREATE TABLE IF NOT EXISTS idem.schema_migrations (
				version    integer PRIMARY KEY,
				name       text NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM idem.schema_migrations").Scan(&current); err != nil {
			return err
		}
		if current > len(all) {
			return fmt.Errorf("database schema idem is at version %d, newer than this idem binary knows (%d): upgrade idem", current, len(all))
		}
		for _, m := range all[current:] {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO idem.schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return err
			}
			applied = append(applied, m)
		}
		if len(applied) == 0 {
			return nil
		}
		return analyzeUnanalyzed(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// analyzeUnanalyzed gives statistics to idem's tables that hold rows but
// have none yet (a table an upgrade rebuilt or filled), so the plans made
// on them from the first load know their size. An empty table is left
// unanalyzed on purpose: PostgreSQL plans a never-analyzed table as if it
// held at least ten pages, where an index probe wins, but believes an
// analyzed empty one, where reading it whole wins; a plan kept from that
// moment would read the table whole as it grows.
func analyzeUnanalyzed(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `
		SELECT format('%I.%I', n.nspname, c.relname)
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = 'idem' AND c.relkind = 'r' AND c.reltuples < 0 AND pg_relation_size(c.oid) > 0`)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := tx.Exec(ctx, "ANALYZE "+t); err != nil {
			return fmt.Errorf("analyze %s: %w", t, err)
		}
	}
	return nil
}

// Version reports the schema version the database is at (0: not migrated).
func Version(ctx context.Context, db Querier) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass('idem.schema_migrations') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := db.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM idem.schema_migrations").Scan(&v)
	return v, err
}
