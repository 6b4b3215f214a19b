package e2e

// PostgreSQL over TLS with sslmode=verify-full against a test CA, on a
// cluster of its own: ssl on, password (SCRAM) authentication over TLS only.

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/embeddednats"
	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/testkit/pgtest"
)

// tlsPostgres is a throwaway cluster that takes the superuser without a
// password over plain TCP (the test's own back door) and everybody else
// only over TLS with a SCRAM password.
type tlsPostgres struct {
	srv *localpg.Server
	pki *pki
}

func startTLSPostgres(t *testing.T) *tlsPostgres {
	t.Helper()
	p := newPKI(t, t.TempDir(), "pg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := localpg.Start(ctx, localpg.Options{
		TLS: &localpg.TLS{Cert: p.ServerCert, Key: p.ServerKey},
		HBA: []string{
			"host    all postgres 127.0.0.1/32 trust",
			"hostssl all all      127.0.0.1/32 scram-sha-256",
			"host    all all      127.0.0.1/32 reject",
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return &tlsPostgres{srv: srv, pki: p}
}

// database creates a login role with password and a database it owns, with
// the harness's tables created through TLS by that role. It returns idem's
// URL (verify-full against the test CA) and the database.
func (pg *tlsPostgres) database(t *testing.T, role, password string) (string, *pgtest.DB) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pg.srv.URL("postgres"))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", pgx.Identifier{role}.Sanitize(), password))
	require.NoError(t, err)
	name := role + "_db"
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" OWNER "+pgx.Identifier{role}.Sanitize())
	require.NoError(t, err)
	u := pg.url(role, password, name, "verify-full", pg.pki.CAFile)
	pool, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = audit.Migrate(ctx, pool)
	require.NoError(t, err)
	db := &pgtest.DB{Name: name, URL: u, Pool: pool}
	db.Exec(t, stagingSQL)
	return u, db
}

func (pg *tlsPostgres) url(role, password, db, sslmode, rootCert string) string {
	q := url.Values{"sslmode": {sslmode}}
	if rootCert != "" {
		q.Set("sslrootcert", rootCert)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(role, password), Host: fmt.Sprintf("127.0.0.1:%d", pg.srv.Port),
		Path: "/" + db, RawQuery: q.Encode()}
	return u.String()
}

func TestPostgresTLSVerifyFull(t *testing.T) {
	t.Parallel()
	pg := startTLSPostgres(t)
	pgURL, db := pg.database(t, "idem_tls", "tls-pw-61d0")
	dir := t.TempDir()
	ns, err := embeddednats.Start(embeddednats.Options{StoreDir: filepath.Join(dir, "js")})
	require.NoError(t, err)
	t.Cleanup(ns.Stop)
	w := securedWorld(t, ns, nil, "", db, pgURL)

	p := w.serve()
	// Every connection idem holds is encrypted.
	var tlsConns, plainConns int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl)
		  FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		 WHERE a.application_name = 'idem'`).Scan(&tlsConns, &plainConns))
	require.Positive(t, tlsConns)
	require.Zero(t, plainConns)
	w.publish("2026-11-02", "r1", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitSettled()
	require.Equal(t, w.expected("2026-11-02"), w.target())
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second), p.output())

	// A server that answered and refused says so; one that could not be
	// talked to (TLS) is not reached.
	for _, c := range []struct{ name, url, want, opens string }{
		{"server certificate from another CA", pg.url("idem_tls", "tls-pw-61d0", db.Name, "verify-full", newPKI(t, dir, "other").CAFile),
			"certificate signed by unknown authority", "cannot reach PostgreSQL"},
		{"no TLS", pg.url("idem_tls", "tls-pw-61d0", db.Name, "disable", ""), "no encryption", "refused the login of idem_tls"},
		{"wrong password", pg.url("idem_tls", "not-it", db.Name, "verify-full", pg.pki.CAFile), "password authentication failed",
			"refused the login of idem_tls: password authentication failed"},
	} {
		code, out := runIdem(t, []string{"IDEM_DATABASE_URL=" + c.url}, "serve", "--config", w.cfg)
		require.Equal(t, 1, code, "%s: %s", c.name, out)
		require.Contains(t, out, c.want, c.name)
		require.Contains(t, out, c.opens, c.name)
	}
}
