package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parquet-go/parquet-go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/lineage"
	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/sources/pgsource"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/lineagetest"
	"github.com/idem-data/idem/testkit/pgtest"
	"github.com/idem-data/idem/testkit/s3test"
)

// stagedEnv is one dataset whose rows come from files, on its own database.
type stagedEnv struct {
	t  *testing.T
	db *pgtest.DB
	h  *handlers.Handler
}

func newStagedEnv(t *testing.T, strategy string, spec strategies.Spec, ddl string, src files.Spec, store files.Store, waitUpTo time.Duration) *stagedEnv {
	t.Helper()
	return newStagedEnvWith(t, strategy, spec, ddl, src, store, waitUpTo, false)
}

// newStagedEnvWith is newStagedEnv with the stage's Evolve (the dataset's
// spec.OnSchemaChange takes new file columns).
func newStagedEnvWith(t *testing.T, strategy string, spec strategies.Spec, ddl string, src files.Spec, store files.Store, waitUpTo time.Duration, evolve bool) *stagedEnv {
	t.Helper()
	db := audittest.NewDB(t)
	_, err := audit.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	db.Exec(t, "CREATE SCHEMA analytics;")
	db.Exec(t, ddl)
	spec.Dataset, spec.Source = "ds", handlers.StageSQL
	st, err := strategies.New(strategy, spec)
	require.NoError(t, err)
	stage := &handlers.Staged{Files: &handlers.FileSource{Spec: src, Store: store}, WaitUpTo: waitUpTo, PartitionColumn: spec.PartitionColumn, Evolve: evolve}
	if strategy == "append_dedupe" {
		stage.Reserved = []string{"run_id", "load_seq"}
	}
	ds := &handlers.Dataset{Name: "ds", Strategy: st, Target: spec.Target.String(), Stage: stage}
	h := &handlers.Handler{DB: db.Pool, Pipeline: "test", Datasets: map[string]*handlers.Dataset{"ds": ds}, Log: zerolog.Nop()}
	require.Empty(t, h.Prepare(context.Background()))
	return &stagedEnv{t: t, db: db, h: h}
}

func (e *stagedEnv) load(partition, runID string, published time.Time) (handlers.Outcome, error) {
	body, err := schemas.PartitionReady{Dataset: "ds", Partition: partition, RunID: runID}.Marshal()
	require.NoError(e.t, err)
	return e.h.HandleMessage(context.Background(), "idem.ready.ds", body, handlers.Meta{Published: published})
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
}

const stagedDDL = `CREATE TABLE analytics.t (id bigint, event_date date NOT NULL, amount numeric(12,2), note text);`

// A partition of local CSV files: waits for its marker (no attempt, no
// audit row), loads once it lands with the partition column filled from
// the event, records each file it read, and is never doubled by a rerun.
func TestFilesSourceWaitsForItsMarkerThenLoadsOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := files.Spec{URL: "file://" + dir + "/orders/dt={partition}/", Format: files.CSV, Ready: files.ReadyRule{Marker: "_SUCCESS"}}.WithDefaults()
	require.NoError(t, spec.Validate())
	store, err := files.NewStore(spec, files.S3Options{})
	require.NoError(t, err)
	e := newStagedEnv(t, "delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		stagedDDL, spec, store, time.Hour)
	part := filepath.Join(dir, "orders", "dt=2026-11-28")
	writeFile(t, filepath.Join(part, "part-0001.csv"), "id,amount,note\n1,1.50,a\n2,2.50,\"b, with a comma\"\n")
	writeFile(t, filepath.Join(part, "part-0002.csv"), "note,id,amount\nc,3,3.25\n")

	_, err = e.load("2026-11-28", "r1", time.Now())
	var wait *handlers.WaitError
	require.ErrorAs(t, err, &wait, "no marker: the event waits")
	require.Contains(t, wait.Error(), "_SUCCESS")
	require.GreaterOrEqual(t, wait.WaitFor(), 2*time.Second)
	require.False(t, handlers.IsFatal(err))
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "a wait is no attempt")
	published := time.Now().Add(-time.Minute)
	_, err = e.load("2026-11-28", "r1", published)
	require.ErrorAs(t, err, &wait)
	w, err := audit.WaitOf(context.Background(), e.db.Pool, "test", "ds", "2026-11-28")
	require.NoError(t, err)
	require.NotNil(t, w, "the wait is where the page and why read it")
	require.Equal(t, "r1", w.RunID)
	require.Equal(t, 2, w.Checks)
	require.False(t, w.GaveUp)
	require.Contains(t, w.Reason, "_SUCCESS")
	require.WithinDuration(t, published.Add(time.Hour), w.GivesUpAt, time.Millisecond)

	writeFile(t, filepath.Join(part, "_SUCCESS"), "")
	out, err := e.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)
	require.Equal(t, audit.StatusSuccess, out.Status)
	require.Equal(t, int64(3), out.Rows.Inserted)
	require.Equal(t, "copy_delete", out.Rows.Route, "delete_insert copies the files straight into the target")
	require.Equal(t, int64(3), e.db.Int(t, "SELECT count(*) FROM analytics.t WHERE event_date = '2026-11-28'"))
	var note string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), "SELECT note FROM analytics.t WHERE id = 2").Scan(&note))
	require.Equal(t, "b, with a comma", note)
	w, err = audit.WaitOf(context.Background(), e.db.Pool, "test", "ds", "2026-11-28")
	require.NoError(t, err)
	require.Nil(t, w, "an attempt overtook the wait")

	got, err := audit.SourceFilesOf(context.Background(), e.db.Pool, "test", "ds", "2026-11-28", 5)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Len(t, got[0].Files, 2)
	require.Equal(t, int64(2), got[0].Files[0].Rows)
	require.Equal(t, int64(1), got[0].Files[1].Rows)
	require.NotEmpty(t, got[0].Files[0].SHA256)
	require.NotEmpty(t, got[0].Fingerprint)

	out, err = e.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)
	require.Equal(t, audit.StatusSkipped, out.Status, "the same run again is a duplicate")
	require.Equal(t, int64(3), e.db.Int(t, "SELECT count(*) FROM analytics.t"))

	// A file added to the partition: a new run reloads the whole partition
	// in one transaction, never doubling a row.
	writeFile(t, filepath.Join(part, "part-0003.csv"), "id,amount,note\n4,4.00,d\n")
	_, err = e.load("2026-11-28", "r2", time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(4), e.db.Int(t, "SELECT count(*) FROM analytics.t"))
	require.Equal(t, int64(4), e.db.Int(t, "SELECT count(DISTINCT id) FROM analytics.t"))
}

// Past wait_up_to the waiting event is dead-lettered as missing_files;
// an empty prefix without a ready rule is missing_files at once; neither
// counts an attempt.
func TestFilesSourceMissingFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	withMarker := files.Spec{URL: "file://" + dir + "/a/dt={partition}/", Format: files.CSV, Ready: files.ReadyRule{Marker: "_SUCCESS"}}.WithDefaults()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "b"), 0o755))
	store, err := files.NewStore(withMarker, files.S3Options{})
	require.NoError(t, err)
	spec := strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"}
	e := newStagedEnv(t, "delete_insert", spec, stagedDDL, withMarker, store, time.Minute)
	_, err = e.load("2026-11-28", "r1", time.Now().Add(-2*time.Minute))
	require.True(t, handlers.IsFatal(err), "%v", err)
	var f interface{ FatalReason() string }
	require.True(t, errors.As(err, &f))
	require.Equal(t, handlers.ReasonMissingFiles, f.FatalReason())
	require.Contains(t, err.Error(), "wait_up_to 1m0s")
	w, err := audit.WaitOf(context.Background(), e.db.Pool, "test", "ds", "2026-11-28")
	require.NoError(t, err)
	require.True(t, w != nil && w.GaveUp, "the wait's end is recorded: %+v", w)

	bare := files.Spec{URL: "file://" + dir + "/b/dt={partition}/", Format: files.CSV}.WithDefaults()
	store, err = files.NewStore(bare, files.S3Options{})
	require.NoError(t, err)
	e = newStagedEnv(t, "delete_insert", spec, stagedDDL, bare, store, time.Hour)
	_, err = e.load("2026-11-28", "r1", time.Now())
	require.True(t, handlers.IsFatal(err), "%v", err)
	require.True(t, errors.As(err, &f))
	require.Equal(t, handlers.ReasonMissingFiles, f.FatalReason())
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))
}

// Every format from a real S3-compatible server into every strategy: the
// rows land, a second run of the same files doubles nothing, the audit
// names each object with its ETag, and a file that does not match the
// target is fatal.
func TestFilesSourceFromS3IntoEachStrategy(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t) // the credentials, from the environment as in production
	srv.CreateBucket(t, "landing")
	type row struct {
		ID     int64    `parquet:"id"`
		Amount *float64 `parquet:"amount,optional"`
		Note   string   `parquet:"note"`
	}
	one := 1.5
	var pq bytes.Buffer
	require.NoError(t, parquet.Write(&pq, []row{{1, &one, "a"}, {2, nil, "b"}}))
	bodies := map[files.Format][]byte{
		files.CSV:     []byte("id,amount,note\n1,1.50,a\n2,,b\n"),
		files.NDJSON:  []byte("{\"id\": 1, \"amount\": 1.5, \"note\": \"a\"}\n{\"id\": 2, \"amount\": null, \"note\": \"b\"}\n"),
		files.Parquet: pq.Bytes(),
	}
	var bad bytes.Buffer
	require.NoError(t, parquet.Write(&bad, []struct {
		ID       int64 `parquet:"id"`
		Surprise int64 `parquet:"surprise"`
	}{{1, 2}}))
	badBodies := map[files.Format][]byte{files.CSV: []byte("id,surprise\n1,2\n"), files.NDJSON: []byte("{\"id\": 1, \"surprise\": 2}\n"), files.Parquet: bad.Bytes()}
	for _, st := range []struct {
		strategy string
		spec     strategies.Spec
		ddl      string
	}{
		{"delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"}, stagedDDL},
		{"merge", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, Key: []string{"id"}},
			`CREATE TABLE analytics.t (id bigint PRIMARY KEY, amount numeric(12,2), note text);`},
		{"append_dedupe", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, Key: []string{"id"}, PartitionColumn: "event_date",
			View: strategies.Table{Schema: "analytics", Name: "v"}},
			`CREATE TABLE analytics.t (id bigint, event_date date, amount numeric(12,2), note text, run_id text, load_seq bigint);`},
	} {
		for _, format := range []files.Format{files.CSV, files.NDJSON, files.Parquet} {
			t.Run(st.strategy+"/"+string(format), func(t *testing.T) {
				prefix := st.strategy + "-" + string(format)
				spec := files.Spec{URL: "s3://landing/" + prefix + "/dt={partition}/", Format: format}.WithDefaults()
				store, err := files.NewStore(spec, files.S3Options{Endpoint: srv.Endpoint, PathStyle: true})
				require.NoError(t, err)
				e := newStagedEnv(t, st.strategy, st.spec, st.ddl, spec, store, time.Hour)
				key := prefix + "/dt=2026-11-28/part-0001." + string(format)
				etag := srv.Put(t, "landing", key, bodies[format])
				_, err = e.load("2026-11-28", "r1", time.Now())
				require.NoError(t, err)
				_, err = e.load("2026-11-28", "r2", time.Now())
				require.NoError(t, err, "a second run of the same files")
				table := "analytics.t"
				if st.strategy == "append_dedupe" {
					table = "analytics.v"
				}
				require.Equal(t, int64(2), e.db.Int(t, "SELECT count(*) FROM "+table))
				require.Equal(t, int64(1), e.db.Int(t, "SELECT count(*) FROM "+table+" WHERE amount IS NULL AND id = 2"))
				require.Equal(t, int64(1), e.db.Int(t, "SELECT count(*) FROM "+table+" WHERE amount = 1.50 AND note = 'a'"))
				got, err := audit.SourceFilesOf(context.Background(), e.db.Pool, "test", "ds", "2026-11-28", 1)
				require.NoError(t, err)
				require.Len(t, got, 1)
				require.Equal(t, etag, got[0].Files[0].ETag)
				require.Equal(t, "s3://landing/"+key, got[0].Files[0].URL)

				srv.Put(t, "landing", prefix+"/dt=2026-11-29/part-0001."+string(format), badBodies[format])
				_, err = e.load("2026-11-29", "r1", time.Now())
				require.True(t, handlers.IsFatal(err), "%v", err)
				require.ErrorContains(t, err, "surprise")
			})
		}
	}
}

// A partition read from another PostgreSQL (here another database of the
// same server): every value arrives as it was, a rerun never doubles it,
// and the server is named without its password in the rows' story.
func TestPostgresSourceLoadsThePartition(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDB(t)
	src.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.orders (id bigint, event_date date, amount numeric(12,2), note text);
		INSERT INTO app.orders VALUES (1, '2026-11-28', 1.50, E'tab\there'), (2, '2026-11-28', NULL, 'é ''q'''), (3, '2026-11-27', 9, 'other day');`)
	db := audittest.NewDB(t)
	_, err := audit.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	db.Exec(t, "CREATE SCHEMA analytics;"+stagedDDL)
	sspec := strategies.Spec{Dataset: "ds", Source: handlers.StageSQL, Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"}
	st, err := strategies.New("delete_insert", sspec)
	require.NoError(t, err)
	pg := pgsource.Spec{URL: src.URL, SQL: "SELECT id, event_date, amount, note FROM app.orders WHERE event_date = @partition"}.WithDefaults()
	require.NoError(t, pg.Validate())
	ds := &handlers.Dataset{Name: "ds", Strategy: st, Target: "analytics.t", Stage: &handlers.Staged{Postgres: &pg, WaitUpTo: time.Hour, PartitionColumn: "event_date"}}
	h := &handlers.Handler{DB: db.Pool, Pipeline: "test", Datasets: map[string]*handlers.Dataset{"ds": ds}, Log: zerolog.Nop()}
	require.Empty(t, h.Prepare(context.Background()))
	e := &stagedEnv{t: t, db: db, h: h}
	for _, run := range []string{"r1", "r1", "r2"} {
		_, err := e.load("2026-11-28", run, time.Now())
		require.NoError(t, err)
	}
	require.Equal(t, src.Checksum(t, "SELECT id, event_date, amount, note FROM app.orders WHERE event_date = '2026-11-28'"),
		db.Checksum(t, "SELECT id, event_date, amount, note FROM analytics.t"), "row for row, loaded once")
	require.Equal(t, int64(2), db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"))
	require.Equal(t, int64(1), db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'skipped'"))
}

// Files that carry the partition column: a row of another day fails the
// load (fatal, nothing written, the partition's rows kept), as a source
// query's stray row does; rows of the day load straight into the target.
func TestFilesSourceRowOutsideThePartition(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := files.Spec{URL: "file://" + dir + "/dt={partition}/", Format: files.CSV}.WithDefaults()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	store, err := files.NewStore(spec, files.S3Options{})
	require.NoError(t, err)
	e := newStagedEnv(t, "delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		stagedDDL, spec, store, time.Hour)
	part := filepath.Join(dir, "dt=2026-11-28")
	writeFile(t, filepath.Join(part, "a.csv"), "id,event_date,amount,note\n1,2026-11-28,1.00,a\n2,2026-11-28,2.00,b\n")
	out, err := e.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(2), out.Rows.Inserted)

	writeFile(t, filepath.Join(part, "b.csv"), "id,event_date,amount,note\n3,2026-11-28,3.00,c\n4,2026-11-27,4.00,d\n")
	_, err = e.load("2026-11-28", "r2", time.Now())
	require.True(t, handlers.IsFatal(err), "%v", err)
	require.ErrorContains(t, err, "source returned a row for partition 2026-11-27 while loading partition 2026-11-28")
	require.Equal(t, int64(2), e.db.Int(t, "SELECT count(*) FROM analytics.t"), "rolled back: the last load's rows stay")
}

// A file column the target lacks meets the dataset's on_schema_change as a
// SQL source's does: append_new_columns adds it in the load's transaction
// (the rows go through the stage), and the next load, the target now
// shaped like the files, copies straight in; ignore loads the other
// columns of a Parquet file and leaves the table as it is.
func TestFilesSourceNewColumnsMeetOnSchemaChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := files.Spec{URL: "file://" + dir + "/csv/dt={partition}/", Format: files.CSV}.WithDefaults()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "csv"), 0o755))
	store, err := files.NewStore(spec, files.S3Options{})
	require.NoError(t, err)
	e := newStagedEnvWith(t, "delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date",
		OnSchemaChange: strategies.OnSchemaChangeAppend}, stagedDDL, spec, store, time.Hour, true)
	writeFile(t, filepath.Join(dir, "csv", "dt=2026-11-28", "a.csv"), "id,amount,note,colour\n1,1.50,a,red\n2,2.50,b,blue\n")
	out, err := e.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)
	require.Equal(t, "delete", out.Rows.Route, "through the stage, whose new column the strategy adds")
	require.Equal(t, int64(1), e.db.Int(t, "SELECT count(*) FROM analytics.t WHERE id = 2 AND colour = 'blue'"))
	out, err = e.load("2026-11-28", "r2", time.Now())
	require.NoError(t, err)
	require.Equal(t, "copy_delete", out.Rows.Route, "the target has the column now")
	require.Equal(t, int64(2), e.db.Int(t, "SELECT count(*) FROM analytics.t WHERE colour IS NOT NULL"))

	type row struct {
		ID     int64   `parquet:"id"`
		Amount float64 `parquet:"amount"`
		Note   string  `parquet:"note"`
		Score  int32   `parquet:"score"`
	}
	pspec := files.Spec{URL: "file://" + dir + "/pq/dt={partition}/", Format: files.Parquet}.WithDefaults()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "pq", "dt=2026-11-28"), 0o755))
	require.NoError(t, parquet.WriteFile(filepath.Join(dir, "pq", "dt=2026-11-28", "a.parquet"), []row{{1, 1.5, "a", 7}, {2, 2.5, "b", 8}}))
	pstore, err := files.NewStore(pspec, files.S3Options{})
	require.NoError(t, err)
	ig := newStagedEnvWith(t, "merge", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, Key: []string{"id"},
		OnSchemaChange: strategies.OnSchemaChangeIgnore},
		`CREATE TABLE analytics.t (id bigint PRIMARY KEY, amount numeric(12,2), note text);`, pspec, pstore, time.Hour, true)
	_, err = ig.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(2), ig.db.Int(t, "SELECT count(*) FROM analytics.t WHERE amount IS NOT NULL"))
	require.Zero(t, ig.db.Int(t, "SELECT count(*) FROM information_schema.columns WHERE table_name = 't' AND column_name = 'score'"), "ignored")

	// Without Evolve (on_schema_change fail) the same file is refused.
	refuse := newStagedEnv(t, "merge", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, Key: []string{"id"}},
		`CREATE TABLE analytics.t (id bigint PRIMARY KEY, amount numeric(12,2), note text);`, pspec, pstore, time.Hour)
	_, err = refuse.load("2026-11-28", "r1", time.Now())
	require.True(t, handlers.IsFatal(err), "%v", err)
	require.ErrorContains(t, err, "score")
}

// A files dataset's COMPLETE, written to the outbox with its load, names
// the partition's prefix as an input, with every file read in its
// idem_files facet, as idem.source_files records them; the event passes the
// OpenLineage schemas and idem's.
func TestFilesSourceLineageNamesTheFilesRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := files.Spec{URL: "file://" + dir + "/dt={partition}/", Format: files.CSV}.WithDefaults()
	store, err := files.NewStore(spec, files.S3Options{})
	require.NoError(t, err)
	e := newStagedEnv(t, "delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		stagedDDL, spec, store, time.Hour)
	e.h.Lineage = &handlers.Lineage{Namespace: "ns", Warehouse: lineage.NewWarehouse(&e.db.Pool.Config().ConnConfig.Config)}
	writeFile(t, filepath.Join(dir, "dt=2026-11-28", "a.csv"), "id,amount,note\n1,1.50,a\n2,2.50,b\n")
	_, err = e.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)

	var body string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(),
		"SELECT lineage::text FROM idem.outbox WHERE run_id = 'r1' AND lineage ->> 'eventType' = 'COMPLETE'").Scan(&body))
	lineagetest.Validate(t, []byte(body))
	var ev lineage.RunEvent
	require.NoError(t, json.Unmarshal([]byte(body), &ev))
	require.NotEmpty(t, ev.Inputs)
	in := ev.Inputs[len(ev.Inputs)-1]
	require.Equal(t, lineage.Dataset{Namespace: "file", Name: dir + "/dt=2026-11-28/"}, in.Dataset)
	read, err := audit.SourceFilesOf(context.Background(), e.db.Pool, "test", "ds", "2026-11-28", 1)
	require.NoError(t, err)
	require.Len(t, read, 1)
	f := in.InputFacets.Files
	require.NotNil(t, f, "the idem_files facet")
	require.Equal(t, read[0].Fingerprint, f.Fingerprint)
	require.Len(t, f.Files, 1)
	require.Equal(t, read[0].Files[0].URL, f.Files[0].URL)
	require.Equal(t, int64(2), f.Files[0].Rows)
	require.Equal(t, read[0].Files[0].SHA256, f.Files[0].SHA256)
}

// A standby that falls behind between the lag gate asked before the
// attempt and the copy's own: the attempt ends as a wait (recorded
// unavailable, no attempt spent), as the gate's would have been, and once
// replay resumes the partition loads, once, with the primary's rows.
func TestPostgresSourceLagAfterTheGateWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, standby, pc, sc := pgtest.PrimaryWithStandby(t)
	_, err := pc.Exec(ctx, `CREATE TABLE src (id bigint, event_date date, amount numeric(12,2), note text);
		INSERT INTO src SELECT g, '2026-11-28', g, 'row ' || g FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return sc.QueryRow(ctx, "SELECT count(*) FROM src").Scan(&n) == nil && n == 5
	}, 30*time.Second, 20*time.Millisecond, "the standby caught up")

	db := audittest.NewDB(t)
	_, err = audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	db.Exec(t, "CREATE SCHEMA analytics;"+stagedDDL)
	sspec := strategies.Spec{Dataset: "ds", Source: handlers.StageSQL, Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"}
	st, err := strategies.New("delete_insert", sspec)
	require.NoError(t, err)
	pg := pgsource.Spec{URL: standby.URL(""), SQL: "SELECT id, event_date, amount, note FROM src WHERE event_date = @partition",
		MaxReplicaLag: time.Second}.WithDefaults()
	require.NoError(t, pg.Validate())
	ds := &handlers.Dataset{Name: "ds", Strategy: st, Target: "analytics.t", Stage: &handlers.Staged{Postgres: &pg, WaitUpTo: time.Hour, PartitionColumn: "event_date"}}
	held := false
	h := &handlers.Handler{DB: db.Pool, Pipeline: "test", Datasets: map[string]*handlers.Dataset{"ds": ds}, Log: zerolog.Nop(),
		Started: func(string, string, int) {
			if held {
				return
			}
			held = true
			// After the gate, before the copy: replay held behind a
			// commit for longer than max_replica_lag.
			_, err := sc.Exec(ctx, "SELECT pg_wal_replay_pause()")
			require.NoError(t, err)
			_, err = pc.Exec(ctx, "INSERT INTO src SELECT g, '2026-11-28', g, 'late ' || g FROM generate_series(6, 8) g")
			require.NoError(t, err)
			time.Sleep(1500 * time.Millisecond)
		}}
	require.Empty(t, h.Prepare(ctx))
	e := &stagedEnv{t: t, db: db, h: h}

	_, err = e.load("2026-11-28", "r1", time.Now())
	var w interface{ WaitFor() time.Duration }
	require.ErrorAs(t, err, &w, "a lag found by the copy is a wait: %v", err)
	var kind string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT error_kind FROM idem.pipeline_audit WHERE status = 'failed'").Scan(&kind))
	require.Equal(t, "unavailable", kind)
	require.Zero(t, db.Int(t, "SELECT count(*) FROM analytics.t"), "nothing loaded from the lagging standby")

	_, err = sc.Exec(ctx, "SELECT pg_wal_replay_resume()")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := e.load("2026-11-28", "r1", time.Now())
		return err == nil
	}, 30*time.Second, 200*time.Millisecond)
	require.Equal(t, int64(8), db.Int(t, "SELECT count(*) FROM analytics.t"), "the primary's rows, once")
	require.Equal(t, int64(1), db.Int(t, "SELECT attempt FROM idem.pipeline_audit WHERE status = 'success'"), "the wait spent an attempt")
}

// A store that does not answer (here nothing listens at its endpoint, as
// while it is stopped) leaves the partition's readiness unknown: the event
// waits as for a missing marker, no attempt counted, however many times it
// is delivered, and only past wait_up_to is it dead-lettered.
func TestFilesSourceStoreDownWaits(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	endpoint := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	t.Setenv(files.EnvAccessKeyID, "idem-test")
	t.Setenv(files.EnvSecretAccessKey, "idem-test-secret")
	spec := files.Spec{URL: "s3://landing/orders/dt={partition}/", Format: files.CSV, Ready: files.ReadyRule{Marker: "_SUCCESS"}}.WithDefaults()
	store, err := files.NewStore(spec, files.S3Options{Endpoint: endpoint, PathStyle: true})
	require.NoError(t, err)
	e := newStagedEnv(t, "delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		stagedDDL, spec, store, time.Hour)
	for range 5 {
		_, err = e.load("2026-11-28", "r1", time.Now())
		var wait *handlers.WaitError
		require.ErrorAs(t, err, &wait, "a store that does not answer: the event waits")
		require.Contains(t, wait.Error(), "the store could not be listed")
		require.False(t, handlers.IsFatal(err))
	}
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "a wait is no attempt")
	_, err = e.load("2026-11-28", "r1", time.Now().Add(-2*time.Hour))
	require.True(t, handlers.IsFatal(err), "past wait_up_to: %v", err)
	require.ErrorContains(t, err, "wait_up_to 1h0m0s")
}

// A watch's event that waited while the partition's files changed and a
// later event loaded them is skipped, with the reason, instead of loading
// the same files again; an event that is no watch's loads them again, as
// a replay asks.
func TestFilesSourceWatchRunSupersededBySameFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := files.Spec{URL: "file://" + dir + "/orders/dt={partition}/", Format: files.CSV}.WithDefaults()
	store, err := files.NewStore(spec, files.S3Options{})
	require.NoError(t, err)
	e := newStagedEnv(t, "delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		stagedDDL, spec, store, time.Hour)
	part := filepath.Join(dir, "orders", "dt=2026-11-28")
	writeFile(t, filepath.Join(part, "part-0001.csv"), "id,amount,note\n1,1.50,a\n")
	out, err := e.load("2026-11-28", "watch-1111111111111111", time.Now())
	require.NoError(t, err)
	require.Equal(t, audit.StatusSuccess, out.Status)

	// The files change; the watch publishes a second event, and a third
	// once they change again. The third's load reads the newest files
	// first; the second's, delivered late, finds them loaded.
	writeFile(t, filepath.Join(part, "part-0001.csv"), "id,amount,note\n1,1.75,a\n")
	writeFile(t, filepath.Join(part, "part-0002.csv"), "id,amount,note\n2,2.50,b\n")
	out, err = e.load("2026-11-28", "watch-3333333333333333-1", time.Now())
	require.NoError(t, err)
	require.Equal(t, audit.StatusSuccess, out.Status)
	out, err = e.load("2026-11-28", "watch-2222222222222222-1", time.Now())
	require.NoError(t, err)
	require.Equal(t, audit.StatusSkipped, out.Status, "the same files, already loaded")
	var why string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(),
		"SELECT error FROM idem.pipeline_audit WHERE run_id = 'watch-2222222222222222-1'").Scan(&why))
	require.Contains(t, why, "superseded")
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM idem.run_ledger WHERE run_id = 'watch-2222222222222222-1'"))
	require.Equal(t, int64(2), e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"))

	// A replay that is no watch's loads the same files again.
	out, err = e.load("2026-11-28", "manual-1", time.Now())
	require.NoError(t, err)
	require.Equal(t, audit.StatusSuccess, out.Status)
	require.Equal(t, int64(2), e.db.Int(t, "SELECT count(*) FROM analytics.t"))

	// New files: a watch run whose own files are gone still loads the
	// current ones, which no success read yet.
	writeFile(t, filepath.Join(part, "part-0003.csv"), "id,amount,note\n3,3.50,c\n")
	out, err = e.load("2026-11-28", "watch-4444444444444444-3", time.Now())
	require.NoError(t, err)
	require.Equal(t, audit.StatusSuccess, out.Status)
	require.Equal(t, int64(3), e.db.Int(t, "SELECT count(*) FROM analytics.t"))
}

// An object store that fails to serve a file the listing found (503
// SlowDown, as a store under load answers) fails the attempt as a wait:
// recorded unavailable, no attempt spent, however many times; once the
// store serves again the partition loads, as attempt 1.
func TestFilesSourceStoreFailingMidLoadWaits(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	srv.CreateBucket(t, "landing")
	up, err := url.Parse(srv.Endpoint)
	require.NoError(t, err)
	var failing atomic.Bool
	failing.Store(true)
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(up)
			r.Out.Host = r.In.Host // what the client signed
		},
		ErrorLog: log.New(io.Discard, "", 0),
		ModifyResponse: func(resp *http.Response) error {
			if failing.Load() && resp.Request.Method == http.MethodGet && resp.Request.URL.Query().Get("list-type") == "" {
				resp.Body.Close()
				resp.StatusCode, resp.ContentLength = http.StatusServiceUnavailable, -1
				resp.Header.Del("Content-Length")
				resp.Body = io.NopCloser(strings.NewReader(`<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>`))
			}
			return nil
		},
	})
	defer proxy.Close()
	spec := files.Spec{URL: "s3://landing/orders/dt={partition}/", Format: files.CSV}.WithDefaults()
	store, err := files.NewStore(spec, files.S3Options{Endpoint: proxy.URL, PathStyle: true})
	require.NoError(t, err)
	e := newStagedEnv(t, "delete_insert", strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		stagedDDL, spec, store, time.Hour)
	srv.Put(t, "landing", "orders/dt=2026-11-28/part-0001.csv", []byte("id,amount,note\n1,1.50,a\n2,,b\n"))
	for range 5 {
		_, err = e.load("2026-11-28", "r1", time.Now())
		var wait *handlers.WaitError
		require.ErrorAs(t, err, &wait, "a store failing mid-load: the event waits")
		require.False(t, handlers.IsFatal(err))
	}
	require.Equal(t, int64(5), e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'failed' AND error_kind = 'unavailable'"))
	failing.Store(false)
	_, err = e.load("2026-11-28", "r1", time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(2), e.db.Int(t, "SELECT count(*) FROM analytics.t"))
	require.Equal(t, int64(1), e.db.Int(t, "SELECT attempt FROM idem.pipeline_audit WHERE status = 'success'"), "the waits spent attempts")
}

// A source database that does not answer (stopped, as during its
// failover) leaves the partition's readiness unknown: whether the lag gate
// or the fingerprint asks it before the attempt or the copy is the first
// to, the event waits,
// however many times it is delivered, and spends no attempt; once the
// source is back it loads, once, as attempt 1. Only past wait_up_to is it
// dead-lettered. Counted by its deliveries instead, a failover longer than
// the backoff dead-lettered valid events as exhausted.
func TestPostgresSourceDownWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, err := localpg.Start(ctx, localpg.Options{Copy: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	sc, err := pgx.Connect(ctx, src.URL(""))
	require.NoError(t, err)
	_, err = sc.Exec(ctx, `CREATE TABLE src (id bigint, event_date date, amount numeric(12,2), note text);
		INSERT INTO src SELECT g, '2026-11-28', g, 'row ' || g FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	require.NoError(t, sc.Close(ctx))

	for _, first := range []string{"gate", "fingerprint", "copy"} {
		t.Run(first, func(t *testing.T) {
			db := audittest.NewDB(t)
			_, err := audit.Migrate(ctx, db.Pool)
			require.NoError(t, err)
			db.Exec(t, "CREATE SCHEMA analytics;"+stagedDDL)
			sspec := strategies.Spec{Dataset: "ds", Source: handlers.StageSQL, Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"}
			st, err := strategies.New("delete_insert", sspec)
			require.NoError(t, err)
			pg := pgsource.Spec{URL: src.URL(""), SQL: "SELECT id, event_date, amount, note FROM src WHERE event_date = @partition"}.WithDefaults()
			ds := &handlers.Dataset{Name: "ds", Strategy: st, Target: "analytics.t", Stage: &handlers.Staged{Postgres: &pg, WaitUpTo: time.Hour, PartitionColumn: "event_date"}}
			switch first {
			case "gate":
				pg.MaxReplicaLag = time.Minute
			case "fingerprint":
				ds.Fingerprint = &handlers.Fingerprint{SQL: "SELECT count(*) FROM src WHERE event_date = @partition"}
			}
			require.NoError(t, pg.Validate())
			h := &handlers.Handler{DB: db.Pool, Pipeline: "test", Datasets: map[string]*handlers.Dataset{"ds": ds}, Log: zerolog.Nop()}
			require.Empty(t, h.Prepare(ctx))
			e := &stagedEnv{t: t, db: db, h: h}

			require.NoError(t, src.Stop(ctx, "fast"))
			for range 6 {
				_, err = e.load("2026-11-28", "r1", time.Now())
				var wait *handlers.WaitError
				require.ErrorAs(t, err, &wait, "a source that does not answer: the event waits")
				require.False(t, handlers.IsFatal(err))
			}
			require.Zero(t, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE error_kind IS DISTINCT FROM 'unavailable'"),
				"no attempt spent")
			_, err = e.load("2026-11-28", "r1", time.Now().Add(-2*time.Hour))
			require.True(t, handlers.IsFatal(err), "past wait_up_to: %v", err)
			require.ErrorContains(t, err, "wait_up_to 1h0m0s")

			require.NoError(t, src.Restart(ctx, ""))
			_, err = e.load("2026-11-28", "r1", time.Now())
			require.NoError(t, err)
			require.Equal(t, int64(5), db.Int(t, "SELECT count(*) FROM analytics.t"))
			require.Equal(t, int64(1), db.Int(t, "SELECT attempt FROM idem.pipeline_audit WHERE status = 'success'"),
				"the waits spent no attempt")
		})
	}
}
