package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var roleSeq atomic.Int64

// psqlIf matches a psql \if ... \endif block: grants.sql sets the password
// there from a psql variable, which LoaderRole sets by itself.
var psqlIf = regexp.MustCompile(`(?s)\\if .*?\\endif\n`)

// LoaderRole runs the grants script at grantsPath (deploy/postgres/
// grants.sql) on db, as its administrator, with its role idem_loader
// renamed to one of this test's own (roles belong to the cluster, which
// tests share) and edit applied to the script when not nil. It returns
// the role and a URL of db that logs in as it; the role is dropped when
// t ends.
func (db *DB) LoaderRole(t testing.TB, grantsPath string, edit func(string) string) (role, roleURL string) {
	t.Helper()
	grants, err := os.ReadFile(grantsPath)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	role = fmt.Sprintf("idem_loader_%d_%d", os.Getpid(), roleSeq.Add(1))
	sql := strings.ReplaceAll(psqlIf.ReplaceAllString(string(grants), ""), "idem_loader", role)
	if edit != nil {
		sql = edit(sql)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, u := range []string{db.URL, AdminURL()} {
			if c, err := pgx.Connect(ctx, u); err == nil {
				_, _ = c.Exec(ctx, "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
				_, _ = c.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
				_ = c.Close(ctx)
			}
		}
	})
	db.Exec(t, sql)
	password := fmt.Sprintf("pw-%d-%d", os.Getpid(), time.Now().UnixNano())
	db.Exec(t, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" PASSWORD '"+password+"'")
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.User = url.UserPassword(role, password)
	return role, u.String()
}
