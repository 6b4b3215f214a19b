package handlers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/sources/pgsource"
)

// StageTable is where a staged source's rows land inside the load's
// transaction: a temporary table dropped at its commit or rollback. The
// dataset's strategy reads it as its source (StageSQL), so every strategy,
// the checks and on_schema_change run on files and on another PostgreSQL
// as they do on SQL.
const StageTable = "idem_stage"

// StageSQL is the strategy's source for a staged dataset.
const StageSQL = "SELECT * FROM pg_temp." + StageTable

// Staged is a source outside the warehouse: files (in object storage or on
// disk) or a query on another PostgreSQL. Its rows are copied into
// StageTable in the load's transaction, before the strategy runs. Exactly
// one of Files and Postgres is set.
type Staged struct {
	Files    *FileSource
	Postgres *pgsource.Spec
	// WaitUpTo is how long an event waits for its source to be ready (files
	// without their ready rule met, a standby too far behind) before it is
	// dead-lettered; nothing runs and no attempt is spent meanwhile.
	WaitUpTo time.Duration
	// PartitionColumn is filled from the event when the files lack it.
	PartitionColumn string
	// Reserved are the target's columns the strategy fills itself
	// (append_dedupe's run_id and load sequence): never staged.
	Reserved []string
	// Evolve: the dataset's on_schema_change may take a file column the
	// target lacks (ignore, append_new_columns, sync_all_columns). Each
	// attempt then reads its files' headers or footers first, and a column
	// the target lacks joins the stage, where the strategy meets it as it
	// meets a SQL source's new column. Without it such a column fails the
	// load as the file is opened (schema_mismatch).
	Evolve bool

	// def is the stage's definition, read from the catalog when the
	// dataset is prepared; replaced whole, never changed in place.
	def atomic.Pointer[stageDef]
}

// stageDef is a stage's definition: its columns (the target's, less
// Reserved and the generated ones) and the statement that creates it.
type stageDef struct {
	columns []files.Column
	create  string
}

// FileSource is a dataset's files: where they are and the store that
// holds them.
type FileSource struct {
	Spec  files.Spec
	Store files.Store
}

// staging is one attempt's view of its staged source: the listing the
// ready rule accepted, which the copy reads with the same identities, the
// files' columns the target lacks (Staged.Evolve), and the stage's
// definition as the attempt created it.
type staging struct {
	s       *Staged
	listing *files.Listing
	extra   []files.Column
	def     *stageDef
}

// ready is asked before the attempt is counted: are the event's source
// rows there to load? A wait within WaitUpTo comes back as a *WaitError;
// past it, as a fatal error naming what never came.
func (s *Staged) ready(ctx context.Context, key schemas.Partition, published, now time.Time) (*staging, error) {
	st := &staging{s: s}
	if s.Postgres != nil {
		if s.Postgres.MaxReplicaLag <= 0 {
			return st, nil
		}
		// The lag gate, asked on its own before the attempt is counted; the
		// copy asks it again, in its snapshot.
		_, err := pgsource.Fingerprint(ctx, *s.Postgres, "SELECT 1", pgsource.Params{Partition: key.Key})
		var lag interface{ NotReady() bool }
		if errors.As(err, &lag) && lag.NotReady() {
			return nil, s.wait(err, published, now)
		}
		if err != nil {
			return nil, s.unanswered(ctx, err, published, now)
		}
		return st, nil
	}
	prefix, err := files.Resolve(s.Files.Spec, key)
	if err != nil {
		return nil, Fatal(schemas.ReasonInvalidEvent, err)
	}
	r, err := files.Ready(ctx, s.Files.Store, s.Files.Spec, prefix, now)
	var manifest *files.ManifestError
	switch {
	case err == nil:
	case IsFatal(err) || errors.As(err, &manifest) || ctx.Err() != nil:
		return nil, err
	default:
		// The store did not answer (stopped, refusing, failing): whether
		// the partition is complete is unknown, so the event waits as for
		// a marker not there yet. No load ran, so no attempt is spent;
		// past wait_up_to it is dead-lettered.
		return nil, s.wait(fmt.Errorf("the store could not be listed: %w", err), published, now)
	}
	if err := r.Err(); err != nil {
		return nil, s.wait(err, published, now)
	}
	st.listing = &r.Listing
	return st, nil
}

// newColumns finds, for a dataset whose on_schema_change may take them
// (Staged.Evolve), the columns st's files have and the stage lacks. A
// stage read before a load added a column to the target is read again
// first, so the column is no longer new.
func (s *Staged) newColumns(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, target string, st *staging) error {
	if !s.Evolve || st.listing == nil {
		return nil
	}
	var err error
	if st.extra, err = s.extraColumns(ctx, st.listing); err != nil || len(st.extra) == 0 {
		return err
	}
	if err := s.prepare(ctx, db, target); err != nil {
		return err
	}
	st.extra, err = s.extraColumns(ctx, st.listing)
	return err
}

// extraColumns reads the header or footer of each file of l and returns
// the columns the stage lacks, in the order the files first name them,
// each with the type its first file gives it.
func (s *Staged) extraColumns(ctx context.Context, l *files.Listing) ([]files.Column, error) {
	def := s.def.Load()
	if def == nil {
		return nil, nil // not prepared yet: the attempt prepares it, and the next one looks
	}
	known := map[string]bool{}
	for _, c := range def.columns {
		known[c.Name] = true
	}
	for _, r := range s.Reserved {
		known[r] = true
	}
	var extra []files.Column
	for i := range l.Files {
		cols, err := files.FileColumns(ctx, s.Files.Store, s.Files.Spec, &l.Files[i])
		if err != nil {
			return nil, err
		}
		for _, c := range cols {
			if !known[c.Name] && c.Name != "" {
				known[c.Name] = true
				extra = append(extra, c)
			}
		}
	}
	return extra, nil
}

// stageDef is the attempt's stage: the dataset's, with the files' extra
// columns when there are any.
func (st *staging) stageDef() *stageDef {
	def := st.s.def.Load()
	if len(st.extra) == 0 {
		return def
	}
	return newStageDef(append(slices.Clip(def.columns), st.extra...))
}

// direct says whether the rows may be copied straight into the target: a
// stage shaped like it, no column the strategy must first add or leave out.
func (st *staging) direct() bool { return len(st.extra) == 0 }

// wait turns a source not ready into a wait, or into its dead letter once
// the event has waited WaitUpTo.
func (s *Staged) wait(err error, published, now time.Time) error {
	var fatal interface{ Fatal() bool }
	if errors.As(err, &fatal) && fatal.Fatal() {
		return err // no file and no ready rule: missing_files at once
	}
	reason := ReasonNotReady
	if s.Files != nil {
		reason = ReasonMissingFiles
	}
	return waitOrGiveUp(err, published, now, s.WaitUpTo, reason)
}

// unanswered is what a failure to ask the source before an attempt (its
// lag gate, its fingerprint) comes to. A source that did not answer (down,
// refusing, shutting down for a failover) leaves the partition's readiness
// unknown, and no load ran: the event waits, as for a standby behind or a
// store that cannot be listed, and spends no attempt; past wait_up_to it
// is dead-lettered. Counting such failures as attempts would let a source's
// failover, longer than the backoff, dead-letter valid events. A fatal
// error, or ctx's own end, stands.
func (s *Staged) unanswered(ctx context.Context, err error, published, now time.Time) error {
	if err == nil || IsFatal(err) || ctx.Err() != nil {
		return err
	}
	return s.wait(fmt.Errorf("the source could not be asked: %w", err), published, now)
}

// sourceUnavailable reports a source that cannot be used at all now
// (pgsource's SourceUnavailable): an outage of the source, not of the
// warehouse, nor the event's fault.
func sourceUnavailable(err error) bool {
	var u interface{ SourceUnavailable() bool }
	return errors.As(err, &u) && u.SourceUnavailable()
}

// prepare reads the target's columns into the stage's definition, once
// per dataset and process (Dataset.prepared), in tx.
func (s *Staged) prepare(ctx context.Context, tx interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, target string) error {
	rows, err := tx.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		  FROM pg_attribute a
		 WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		 ORDER BY a.attnum`, target)
	if err != nil {
		return fmt.Errorf("stage: read the columns of %s: %w", target, err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (files.Column, error) {
		var c files.Column
		return c, r.Scan(&c.Name, &c.Type)
	})
	if err != nil {
		return fmt.Errorf("stage: read the columns of %s: %w", target, err)
	}
	cols = slices.DeleteFunc(cols, func(c files.Column) bool { return slices.Contains(s.Reserved, c.Name) })
	if len(cols) == 0 {
		return Fatal(schemas.ReasonSchemaMismatch, fmt.Errorf("stage: %s has no column a source could fill", target))
	}
	s.def.Store(newStageDef(cols))
	return nil
}

// newStageDef is the stage of columns cols, in that order.
func newStageDef(cols []files.Column) *stageDef {
	defs := make([]string, len(cols))
	for i, c := range cols {
		defs[i] = pgx.Identifier{c.Name}.Sanitize() + " " + c.Type
	}
	return &stageDef{columns: cols, create: "CREATE TEMPORARY TABLE " + StageTable + " (" + strings.Join(defs, ", ") + ") ON COMMIT DROP"}
}

// queueCreate queues the stage's creation in the load's transaction,
// before the strategy's catalog reads describe it as the source.
func (st *staging) queueCreate(b *pgx.Batch) {
	st.def = st.stageDef()
	b.Queue(st.def.create)
}

// copyInto fills table (the stage, or the target itself) with the
// attempt's rows, each meeting where (COPY … WHERE; "" for none): the
// files of the listing ready accepted, each read with the identity it was
// listed with (a file replaced since fails the attempt, transient, never
// loads two versions), or the query on the source server, in one
// REPEATABLE READ snapshot. It returns the rows written.
func (st *staging) copyInto(ctx context.Context, tx pgx.Tx, p schemas.Partition, runID string, table pgx.Identifier, where string) (int64, error) {
	s := st.s
	if s.Postgres != nil {
		cols := make([]string, len(st.def.columns))
		for i, c := range st.def.columns {
			cols[i] = c.Name
		}
		res, err := pgsource.Copy(ctx, *s.Postgres, pgsource.Params{Partition: p.Key, RunID: runID}, tx,
			pgsource.Target{Table: table, Columns: cols, Where: where})
		// A standby that fell behind since ready asked fails the attempt
		// with its *LagError, which failed turns into a wait.
		return res.Rows, err
	}
	t := st.target(p)
	t.Table, t.Where = table, where
	return files.Copy(ctx, tx.Conn().PgConn(), s.Files.Store, s.Files.Spec, st.listing, t)
}

// target is the stage as the files fill it, the partition column filled
// from the event when the files lack it.
func (st *staging) target(p schemas.Partition) files.Target {
	fill := map[string]string{}
	if st.s.PartitionColumn != "" {
		fill[st.s.PartitionColumn] = p.Key
	}
	return files.Target{Table: pgx.Identifier{"pg_temp", StageTable}, Columns: st.def.columns, Fill: fill}
}

// Inspection is what a load of a files dataset's partition would meet
// now, read without loading: whether the partition is complete, its files,
// and each file whose header or schema does not fit the target.
type Inspection struct {
	// Waiting says why the partition is not complete yet; empty when it is.
	Waiting  string
	Files    []files.File
	Problems []error
	// NewColumns are the files' columns the target lacks, which the
	// dataset's on_schema_change meets (Staged.Evolve).
	NewColumns []files.Column
}

// Inspect lists ds's partition p and opens each file as a load would
// (a CSV's header, NDJSON's first rows, a Parquet footer), reading no
// further: for `idem validate`. ds must be prepared (Predict does it).
// A partition with no file and no ready rule is the error a load would
// dead-letter.
func (ds *Dataset) Inspect(ctx context.Context, p schemas.Partition) (Inspection, error) {
	var in Inspection
	s := ds.Stage
	if s == nil || s.Files == nil {
		return in, fmt.Errorf("dataset %q: its source is not files", ds.Name)
	}
	now := time.Now()
	st, err := s.ready(ctx, p, now, now)
	var w *WaitError
	if errors.As(err, &w) {
		in.Waiting = w.Reason
		return in, nil
	}
	if err != nil {
		return in, err
	}
	if s.def.Load() == nil {
		return in, fmt.Errorf("dataset %q: not prepared", ds.Name)
	}
	if s.Evolve {
		if st.extra, err = s.extraColumns(ctx, st.listing); err != nil {
			return in, err
		}
	}
	st.def = st.stageDef()
	in.Files, in.NewColumns = st.listing.Files, st.extra
	t := st.target(p)
	for i := range in.Files {
		stream, err := files.OpenStream(ctx, s.Files.Store, s.Files.Spec, &in.Files[i], t)
		if err != nil {
			in.Problems = append(in.Problems, err)
			continue
		}
		_ = stream.Close()
	}
	return in, nil
}

// sourceFiles are the files the attempt read, for the audit, and the
// listing's fingerprint.
func (st *staging) sourceFiles() (string, []audit.SourceFile) {
	if st == nil || st.listing == nil {
		return "", nil
	}
	out := make([]audit.SourceFile, len(st.listing.Files))
	for i, f := range st.listing.Files {
		sf := audit.SourceFile{URL: f.URL, Size: f.Size, ETag: f.ETag, VersionID: f.VersionID, SHA256: f.SHA256, Rows: f.Rows}
		if !f.ModTime.IsZero() {
			t := f.ModTime
			sf.Modified = &t
		}
		out[i] = sf
	}
	return st.listing.Fingerprint, out
}

// prepareStage reads the stage's columns and creates it (empty) in tx, so
// that the strategy's setup and a prediction can describe it as the
// dataset's source. Nothing for a dataset without a stage.
func (ds *Dataset) prepareStage(ctx context.Context, tx pgx.Tx) error {
	if ds.Stage == nil {
		return nil
	}
	if err := ds.Stage.prepare(ctx, tx, ds.Target); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, ds.Stage.def.Load().create)
	return err
}

// queueSuperseded queues, for a watch's run (its run_id starts with
// schemas.WatchRunIDPrefix), whether the partition's latest success read the
// listing this load would read: its event waited while another event of
// the partition, published after the files changed, loaded them first.
// Loading them again would only repeat that load, so why receives the
// reason the run is skipped; "" otherwise. It runs under the partition
// lock, with the ledger's lookup. Nothing is queued for other runs, or for
// a source that is not files.
func (st *staging) queueSuperseded(b *pgx.Batch, k audit.RunKey, why *string) {
	if st == nil || st.listing == nil || !strings.HasPrefix(k.RunID, schemas.WatchRunIDPrefix) {
		return
	}
	current := st.listing.Fingerprint
	if len(st.listing.Files) == 0 {
		current = "" // a load that reads no file records none
	}
	b.Queue(`
		SELECT s.id, coalesce(f.fingerprint, '') = $4
		  FROM (SELECT p.id FROM idem.pipeline_audit p
		         WHERE p.dag_id = $1 AND p.task_id = $2 AND p.partition_key = $3 AND p.status = 'success'
		         ORDER BY p.id DESC LIMIT 1) s
		  LEFT JOIN LATERAL (SELECT sf.fingerprint FROM idem.source_files sf
		                      WHERE sf.audit_id = s.id ORDER BY sf.ordinal LIMIT 1) f ON true`,
		k.Pipeline, k.Dataset, k.Partition, current).Query(func(rows pgx.Rows) error {
		*why = ""
		for rows.Next() {
			var id int64
			var same bool
			if err := rows.Scan(&id, &same); err != nil {
				return err
			}
			if same {
				*why = fmt.Sprintf("superseded: audit %d already loaded these files (fingerprint %.16s)", id, current)
			}
		}
		return rows.Err()
	})
}
