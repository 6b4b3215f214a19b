package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Archived versions (keep_versions). A partition's rows, as they stood
// before a load, a restore or a retraction replaced them, are copied in
// that transaction into a table of schema idem_archive named after the
// target (schema__table), each row tagged with its version's id
// (idem_version); idem.archived_versions says which run wrote them, when
// they were archived and the target's columns then. The archive table has
// the target's columns and no constraint: a column the target gains is
// added to it, a column whose type changed is renamed aside, so no
// archive ever refuses a load.

// ArchiveSchema is the schema idem keeps archived versions in.
const ArchiveSchema = "idem_archive"

// versionColumn tags each archived row with its version's id.
const versionColumn = "idem_version"

// Archive is where one dataset keeps its partitions' versions.
type Archive struct {
	Pipeline, Dataset string
	// TargetSchema and TargetTable name the dataset's target.
	TargetSchema, TargetTable string
	// PartitionColumn holds the partition key in the target: a version is
	// the target's rows whose partition column equals the partition.
	PartitionColumn string
	// Keep is how many versions of each partition are kept.
	Keep int
}

// Table is the archive table's name in ArchiveSchema.
func (a *Archive) Table() string { return a.TargetSchema + "__" + a.TargetTable }

func (a *Archive) ident() string { return pgx.Identifier{ArchiveSchema, a.Table()}.Sanitize() }
func (a *Archive) target() string {
	return pgx.Identifier{a.TargetSchema, a.TargetTable}.Sanitize()
}

// column is one column of a table, its type as format_type says it.
type column struct{ name, typ string }

// signature is a column list as archived_versions keeps it.
func signature(cs []column) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.name + " " + c.typ
	}
	return strings.Join(parts, ", ")
}

const columnsSQL = `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		  FROM pg_attribute a
		 WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		 ORDER BY a.attnum`

func columnsOf(ctx context.Context, tx pgx.Tx, rel string) ([]column, error) {
	rows, err := tx.Query(ctx, columnsSQL, rel)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.typ)
		return c, err
	})
}

// ensure creates the archive table or brings its columns up to the
// target's, and returns the target's columns.
func (a *Archive) ensure(ctx context.Context, tx pgx.Tx) ([]column, error) {
	target, err := columnsOf(ctx, tx, a.target())
	if err != nil {
		return nil, err
	}
	if len(target) == 0 {
		return nil, fmt.Errorf("target %s.%s not found", a.TargetSchema, a.TargetTable)
	}
	have, err := columnsOf(ctx, tx, a.ident())
	if err != nil || !needsDDL(have, target) {
		return target, err
	}
	// Two loads of the dataset may meet here: one changes the archive
	// while the other waits, then looks again.
	if _, err := tx.Exec(ctx, LockSQL, "archive\x1f"+a.Table()); err != nil {
		return nil, err
	}
	if have, err = columnsOf(ctx, tx, a.ident()); err != nil {
		return nil, err
	}
	if len(have) == 0 {
		// Since schema v26 `idem migrate` creates the schema, and a role
		// that may not create schemas makes its tables there with CREATE
		// on it. CREATE SCHEMA IF NOT EXISTS asks for CREATE on the
		// database even when the schema exists, so it runs only when the
		// schema does not.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL`, ArchiveSchema).Scan(&exists); err != nil {
			return nil, err
		}
		ddl := ""
		if !exists {
			ddl = "CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{ArchiveSchema}.Sanitize() + ";"
		}
		_, err := tx.Exec(ctx, ddl+
			"CREATE TABLE "+a.ident()+" AS SELECT NULL::bigint AS "+versionColumn+", t.* FROM "+a.target()+" t WITH NO DATA;"+
			"CREATE INDEX ON "+a.ident()+" ("+versionColumn+")")
		return target, err
	}
	types := map[string]string{}
	for _, c := range have {
		types[c.name] = c.typ
	}
	for _, c := range target {
		typ, ok := types[c.name]
		if ok && typ == c.typ {
			continue
		}
		if ok {
			// The versions written with the old type stay readable
			// under another name; a restore of them is refused.
			aside := fmt.Sprintf("%s__before_%d", c.name, time.Now().UnixMicro())
			if _, err := tx.Exec(ctx, "ALTER TABLE "+a.ident()+" RENAME COLUMN "+pgx.Identifier{c.name}.Sanitize()+
				" TO "+pgx.Identifier{aside}.Sanitize()); err != nil {
				return nil, err
			}
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+a.ident()+" ADD COLUMN "+pgx.Identifier{c.name}.Sanitize()+" "+c.typ); err != nil {
			return nil, err
		}
	}
	return target, nil
}

func needsDDL(have, target []column) bool {
	if len(have) == 0 {
		return true
	}
	types := map[string]string{}
	for _, c := range have {
		types[c.name] = c.typ
	}
	for _, c := range target {
		if types[c.name] != c.typ {
			return true
		}
	}
	return false
}

func columnList(prefix string, cs []column) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = prefix + pgx.Identifier{c.name}.Sanitize()
	}
	return strings.Join(parts, ", ")
}

// LatestRun is the run whose rows a partition holds: the ledger's latest
// success of it ("" when it has none).
func LatestRun(ctx context.Context, db Querier, pipeline, dataset, partition string) (string, error) {
	var run string
	err := db.QueryRow(ctx, `
		SELECT run_id FROM idem.run_ledger
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3
		 ORDER BY succeeded_at DESC, audit_id DESC LIMIT 1`, pipeline, dataset, partition).Scan(&run)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return run, err
}

// Save archives the partition's rows, in tx, as a version written by the
// partition's latest run, then keeps the newest Keep versions of the
// partition (and those of keep). A partition no run loaded has nothing to
// archive: id is 0.
func (a *Archive) Save(ctx context.Context, tx pgx.Tx, partition string, keep ...int64) (id int64, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("archive of %s %s: %w", a.Dataset, partition, err)
		}
	}()
	run, err := LatestRun(ctx, tx, a.Pipeline, a.Dataset, partition)
	if err != nil || run == "" {
		return 0, err
	}
	cols, err := a.ensure(ctx, tx)
	if err != nil {
		return 0, err
	}
	if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('idem.archived_versions', 'id'))`).Scan(&id); err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `
		WITH r AS (
		     INSERT INTO `+a.ident()+` (`+versionColumn+`, `+columnList("", cols)+`)
		     SELECT $1, `+columnList("t.", cols)+` FROM `+a.target()+` t
		      WHERE t.`+pgx.Identifier{a.PartitionColumn}.Sanitize()+` = $4
		     RETURNING 1)
		INSERT INTO idem.archived_versions
		       (id, dag_id, task_id, partition_key, run_id, archive_table, columns, row_count)
		OVERRIDING SYSTEM VALUE
		SELECT $1, $2, $3, $4, $5, $6, $7, count(*) FROM r`,
		id, a.Pipeline, a.Dataset, partition, run, a.Table(), signature(cols))
	if err != nil {
		return 0, err
	}
	return id, a.prune(ctx, tx, partition, append(keep, id))
}

// prune deletes the partition's versions beyond the newest Keep, but for
// those of keep. The version rows go through the database's function
// idem.trim_archived_versions, which runs as its owner (idem's role may
// not DELETE in schema idem) and never deletes the partition's newest
// version; the archived rows, in the table idem created, in the same
// statement. The statement reads every id the function returns, so the
// function runs to the end even when the archive table holds no row.
func (a *Archive) prune(ctx context.Context, tx pgx.Tx, partition string, keep []int64) error {
	_, err := tx.Exec(ctx, `
		WITH old AS (SELECT id FROM idem.trim_archived_versions($1, $2, $3, $4::int, $5::bigint[]) AS id),
		     gone AS (DELETE FROM `+a.ident()+` WHERE `+versionColumn+` IN (SELECT id FROM old))
		SELECT count(*) FROM old`,
		a.Pipeline, a.Dataset, partition, a.Keep, keep)
	return err
}

// ArchivedVersion is one archived version of a partition.
type ArchivedVersion struct {
	ID         int64     `json:"id"`
	RunID      string    `json:"run_id"`
	Rows       int64     `json:"rows"`
	ArchivedAt time.Time `json:"archived_at"`
	Columns    string    `json:"columns"`
}

// ErrNoVersion: the partition has no archived version (of the run asked).
var ErrNoVersion = errors.New("no archived version")

// Versions lists a partition's archived versions, newest first.
func Versions(ctx context.Context, db Querier, pipeline, dataset, partition string) ([]ArchivedVersion, error) {
	rows, err := db.Query(ctx, `
		SELECT id, run_id, row_count, archived_at, columns FROM idem.archived_versions
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 ORDER BY id DESC`, pipeline, dataset, partition)
	if err != nil {
		return nil, fmt.Errorf("audit: versions of %s %s: %w", dataset, partition, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ArchivedVersion, error) {
		var v ArchivedVersion
		err := r.Scan(&v.ID, &v.RunID, &v.Rows, &v.ArchivedAt, &v.Columns)
		return v, err
	})
}

// ColumnsChangedError refuses a restore: the target's columns are no
// longer those the version was archived with.
type ColumnsChangedError struct {
	RunID         string
	Archived, Now string
}

func (e *ColumnsChangedError) Error() string {
	return fmt.Sprintf("the target's columns changed since the rows of run %s were archived (then: %s; now: %s); restore them by hand from schema %s",
		e.RunID, e.Archived, e.Now, ArchiveSchema)
}

// Restored is what Restore swapped.
type Restored struct {
	// Version is the version put back; Saved the version the partition's
	// rows before the restore became (0: it held none a run wrote).
	Version ArchivedVersion
	Saved   int64
	// Deleted and Inserted count the target's rows swapped.
	Deleted, Inserted int64
}

// Restore puts back, in tx, the rows of the newest archived version of
// run toRun (toRun "": the newest version), after archiving the
// partition's rows as they stand (so a restore can be undone). The
// version restored is kept. Nothing changes when the partition has no
// such version (ErrNoVersion) or the target's columns changed since it
// was archived (*ColumnsChangedError). The caller holds the partition's
// lock.
func (a *Archive) Restore(ctx context.Context, tx pgx.Tx, partition, toRun string) (Restored, error) {
	var out Restored
	v := &out.Version
	err := tx.QueryRow(ctx, `
		SELECT id, run_id, row_count, archived_at, columns FROM idem.archived_versions
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND ($4 = '' OR run_id = $4)
		 ORDER BY id DESC LIMIT 1`, a.Pipeline, a.Dataset, partition, toRun).Scan(&v.ID, &v.RunID, &v.Rows, &v.ArchivedAt, &v.Columns)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, ErrNoVersion
	}
	if err != nil {
		return out, err
	}
	cols, err := columnsOf(ctx, tx, a.target())
	if err != nil {
		return out, err
	}
	if now := signature(cols); now != v.Columns {
		return out, &ColumnsChangedError{RunID: v.RunID, Archived: v.Columns, Now: now}
	}
	if out.Saved, err = a.Save(ctx, tx, partition, v.ID); err != nil {
		return out, err
	}
	if out.Deleted, err = a.Empty(ctx, tx, partition); err != nil {
		return out, err
	}
	ct, err := tx.Exec(ctx, `INSERT INTO `+a.target()+` (`+columnList("", cols)+`)
		SELECT `+columnList("", cols)+` FROM `+a.ident()+` WHERE `+versionColumn+` = $1`, v.ID)
	if err != nil {
		return out, err
	}
	out.Inserted = ct.RowsAffected()
	return out, nil
}

// Empty deletes the partition's rows from the target, in tx.
func (a *Archive) Empty(ctx context.Context, tx pgx.Tx, partition string) (int64, error) {
	ct, err := tx.Exec(ctx, `DELETE FROM `+a.target()+` WHERE `+pgx.Identifier{a.PartitionColumn}.Sanitize()+` = $1`, partition)
	return ct.RowsAffected(), err
}

// PruneVersions deletes the archived versions archived longer ago than
// retention (or than idem.retention_floor, when that is longer), by the
// database clock, each archive table's rows with their version rows, and
// returns how many versions went: archives follow the audit's retention.
// The version rows go through the database's function
// idem.prune_archived_versions, which runs as its owner (idem's role may
// not DELETE in schema idem); the archived rows, in tables idem created,
// in the same statement.
func PruneVersions(ctx context.Context, db Querier, retention time.Duration) (int64, error) {
	age := retention.Microseconds()
	rows, err := db.Query(ctx, `
		SELECT DISTINCT archive_table FROM idem.archived_versions
		 WHERE archived_at < idem.retention_cutoff($1 * interval '1 microsecond')`, age)
	if err != nil {
		return 0, fmt.Errorf("audit: prune versions: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("audit: prune versions: %w", err)
	}
	var n int64
	for _, t := range tables {
		var c int64
		err := db.QueryRow(ctx, `
			WITH old AS (SELECT id FROM idem.prune_archived_versions($1 * interval '1 microsecond', $2) AS id),
			     gone AS (DELETE FROM `+pgx.Identifier{ArchiveSchema, t}.Sanitize()+` WHERE `+versionColumn+` IN (SELECT id FROM old))
			SELECT count(*) FROM old`, age, t).Scan(&c)
		if err != nil {
			return n, fmt.Errorf("audit: prune versions of %s: %w", t, err)
		}
		n += c
	}
	return n, nil
}

// Kinds of a successful attempt that was not a load (pipeline_audit.kind,
// NULL for a load).
const (
	KindRestored  = "restored"
	KindRetracted = "retracted"
)

// StateRetracted is the state of a partition whose latest success is a
// retraction: empty on purpose.
const StateRetracted = "retracted"

// RecordOperatorSuccess writes, in tx, the finished attempt of a restore
// or a retraction (kind) and its ledger entry, which make it the
// partition's latest success, and returns the attempt's id.
func RecordOperatorSuccess(ctx context.Context, tx pgx.Tx, a Attempt, kind string, rows Rows) (int64, error) {
	var deleted *int64
	if rows.Deleted >= 0 {
		deleted = &rows.Deleted
	}
	var id int64
	err := tx.QueryRow(ctx, `
		WITH ins AS (
		     INSERT INTO idem.pipeline_audit
		            (dag_id, task_id, logical_date, partition_key, run_id, status, attempt, force, row_count,
		             rows_inserted, rows_updated, rows_deleted, attributes, kind, finished_at)
		     VALUES ($1, $2, $3, $4, $5, 'success', 1, true, $6, $6, 0, $7, $8, $9, clock_timestamp())
		     RETURNING id),
		led AS (
		     INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
		     SELECT $1, $2, $4, $5, id FROM ins)
		SELECT id FROM ins`,
		a.Pipeline, a.Dataset, a.LogicalDate, a.Partition, a.RunID, rows.Inserted, deleted, nullAttrs(a.Attributes), kind).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("audit: record %s of %s %s: %w", kind, a.Dataset, a.Partition, err)
	}
	return id, nil
}

// retractedSQL: why the partition is retracted, or NULL: its latest
// success is a retraction. A retention keeps each partition's latest
// success, so the tombstone outlives the history.
const retractedSQL = `
		SELECT (SELECT 'retracted by ' || coalesce(a.attributes ->> 'by', 'an operator') || ' at ' ||
		               to_char(a.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') ||
		               coalesce(': ' || (a.attributes ->> 'reason'), '') || '; publish with --force to load it again'
		          FROM (SELECT kind, attributes, finished_at FROM idem.pipeline_audit
		                 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND status = 'success'
		                 ORDER BY id DESC LIMIT 1) a
		         WHERE a.kind = 'retracted')`

// QueueRetracted queues on b whether the partition of k is retracted:
// why receives the reason a later run is skipped, "" when it is not.
func QueueRetracted(b *pgx.Batch, k RunKey, why *string) {
	b.Queue(retractedSQL, k.Pipeline, k.Dataset, k.Partition).QueryRow(func(r pgx.Row) error {
		var s *string
		if err := r.Scan(&s); err != nil {
			return err
		}
		*why = ""
		if s != nil {
			*why = *s
		}
		return nil
	})
}

// QueueSkipWhy queues on b Skip with the reason recorded in the row's
// error column (a retracted partition).
func QueueSkipWhy(b *pgx.Batch, id int64, why string) {
	b.Queue(`UPDATE idem.pipeline_audit SET status = 'skipped', error = $2, finished_at = clock_timestamp()
		 WHERE id = $1 AND status = 'started'`, id, why)
}
