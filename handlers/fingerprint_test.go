package handlers_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/sources/pgsource"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/pgtest"
)

// storedFingerprint is what the success of partition stored.
func storedFingerprint(t *testing.T, db *pgtest.DB, partition string) *audit.Recheck {
	t.Helper()
	r, err := audit.RecheckOf(context.Background(), db.Pool, "test", "ds", partition)
	require.NoError(t, err)
	require.NotNil(t, r, "the success stored a fingerprint")
	return r
}

// A files dataset with recheck: its success stores its listing's
// fingerprint (the one source_files records), and Fingerprint takes the
// same one from the store until a file is added.
func TestFilesSourceStoresItsListingFingerprint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	spec := files.Spec{URL: "file://" + dir + "/dt={partition}/", Format: files.CSV}.WithDefaults()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	store, err := files.NewStore(spec, files.S3Options{})
	require.NoError(t, err)
	e := newStagedEnv(t, "delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		stagedDDL, spec, store, time.Hour)
	e.h.Datasets["ds"].Fingerprint = &handlers.Fingerprint{}
	part := filepath.Join(dir, "dt=2026-11-28")
	writeFile(t, filepath.Join(part, "a.csv"), "id,amount,note\n1,1.00,a\n2,2.00,b\n")
	_, err = e.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)

	r := storedFingerprint(t, e.db, "2026-11-28")
	var listed string
	require.NoError(t, e.db.Pool.QueryRow(ctx, "SELECT fingerprint FROM idem.source_files LIMIT 1").Scan(&listed))
	require.Equal(t, listed, r.Fingerprint.Hash)
	require.Equal(t, "files 1, bytes 33", r.Fingerprint.String())
	key := schemas.Partition{Key: "2026-11-28"}
	now, ok, err := e.h.Fingerprint(ctx, "ds", key, time.Now())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r.Fingerprint.Hash, now.Hash, "the same files, the same fingerprint")

	writeFile(t, filepath.Join(part, "b.csv"), "id,amount,note\n3,3.00,c\n")
	later, _, err := e.h.Fingerprint(ctx, "ds", key, time.Now())
	require.NoError(t, err)
	require.NotEqual(t, r.Fingerprint.Hash, later.Hash)
	require.Equal(t, "files 1 → 2, bytes 33 → 57", audit.Moved(r.Fingerprint, later))
}

// A postgres: source with recheck: its fingerprint query runs on the
// source server, before the copy, and its row is stored with the success.
func TestPostgresSourceStoresItsFingerprint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := pgtest.NewDB(t)
	src.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.orders (id bigint, event_date date, amount numeric(12,2), note text);
		INSERT INTO app.orders VALUES (1, '2026-11-28', 1.50, 'a'), (2, '2026-11-28', 2, 'b'), (3, '2026-11-27', 9, 'other day');`)
	db := audittest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	db.Exec(t, "CREATE SCHEMA analytics;"+stagedDDL)
	st, err := strategies.New("delete_insert", strategies.Spec{Dataset: "ds", Source: handlers.StageSQL,
		Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"})
	require.NoError(t, err)
	pg := pgsource.Spec{URL: src.URL, SQL: "SELECT id, event_date, amount, note FROM app.orders WHERE event_date = @partition"}.WithDefaults()
	ds := &handlers.Dataset{Name: "ds", Strategy: st, Target: "analytics.t", Stage: &handlers.Staged{Postgres: &pg, WaitUpTo: time.Hour, PartitionColumn: "event_date"},
		Fingerprint: &handlers.Fingerprint{SQL: "SELECT count(*) AS count, sum(amount) AS amount FROM app.orders WHERE event_date = @partition"}}
	h := &handlers.Handler{DB: db.Pool, Pipeline: "test", Datasets: map[string]*handlers.Dataset{"ds": ds}, Log: zerolog.Nop()}
	require.Empty(t, h.Prepare(ctx))
	e := &stagedEnv{t: t, db: db, h: h}
	_, err = e.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)
	r := storedFingerprint(t, db, "2026-11-28")
	require.Equal(t, "count 2, amount 3.50", r.Fingerprint.String())

	src.Exec(t, "INSERT INTO app.orders VALUES (4, '2026-11-28', 1, 'late')")
	fp, _, err := h.Fingerprint(ctx, "ds", schemas.Partition{Key: "2026-11-28"}, time.Now())
	require.NoError(t, err)
	require.Equal(t, "count 2 → 3, amount 3.50 → 4.50", audit.Moved(r.Fingerprint, fp))
	_, err = e.load("2026-11-28", "r2", time.Now())
	require.NoError(t, err)
	require.Equal(t, fp.Hash, storedFingerprint(t, db, "2026-11-28").Fingerprint.Hash, "the reload stored the new one")
}
