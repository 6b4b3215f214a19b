package strategies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/schemas"
)

// column of a target table, as the catalog describes it.
type column struct {
	Name      string
	Type      string // format_type, e.g. "numeric(12,2)"
	NotNull   bool
	Generated bool
	// HasDefault: a load whose source leaves the column out writes its
	// default, not NULL.
	HasDefault bool
	// TypeOID and TypMod are pg_attribute's atttypid and atttypmod.
	TypeOID uint32
	TypMod  int32
}

type table struct {
	Table
	OID     uint32
	Kind    string // pg_class.relkind: r plain, p partitioned
	Columns []column
}

func (t *table) column(name string) (column, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return column{}, false
}

// Plan is what a load learned from the catalog: the target's columns, the
// source's columns and, for a natively partitioned target, the children whose
// bounds may hold exactly the partition. It is filled by the queries Describe
// queued, in the same round trip as the caller's own statements.
type Plan struct {
	target *table
	source []string
	// sourceTypes are the source columns' type OIDs and modifiers, in order.
	sourceTypes []sourceType
	children    []child
	// the parent's partition key, when the target is partitioned by one column
	partStrat, partKey, partKeyType string
	partNatts                       int
	missing                         bool

	// The cache, and how this plan was made: fresh (the reads were sent),
	// freshParts (only the children were), cached (filled from the cache).
	cache                     *catalogCache
	spec                      Spec
	params                    Params
	withChildren              bool
	version                   string
	fresh, freshParts, cached bool
	// versionOf, for a load grouped with others of the same target, is the
	// plan whose fingerprint read this one shares (read once per group).
	versionOf *Plan
	// sourceRels are the relations the source reads (from its plan), and
	// sourceVersion their columns' fingerprint: a column added to, dropped
	// from or retyped in one of them changes it.
	sourceRels    []uint32
	sourceVersion string
	// changes are the schema differences this load met (evolve), altered
	// whether it changed the target.
	changes []SchemaChange
	altered bool
	// dry: evolve decides but alters nothing (Check, Predict).
	dry bool
}

type child struct{ schema, name, bound string }

type sourceType struct {
	oid    uint32
	typmod int32
}

// versionSQL reads a fingerprint of the target's definition: its OID and
// the row versions (xmin) of its pg_class row, its columns, its indexes and
// its partitions' pg_inherits rows. Any DDL on the target (a column added,
// dropped, renamed or retyped, an index created or dropped, a partition
// attached or detached, the table dropped and created again) writes one of
// those rows, so the fingerprint changes. No row: no such table.
const versionSQL = `
	SELECT c.oid::text || ':' || md5(c.xmin::text
	       || '/' || coalesce((SELECT string_agg(a.attnum::text || ':' || a.xmin::text, ',' ORDER BY a.attnum)
	                             FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0), '')
	       || '/' || coalesce((SELECT string_agg(i.indexrelid::text || ':' || i.xmin::text, ',' ORDER BY i.indexrelid)
	                             FROM pg_index i WHERE i.indrelid = c.oid), '')
	       || '/' || coalesce((SELECT string_agg(h.inhrelid::text || ':' || h.xmin::text, ',' ORDER BY h.inhrelid)
	                             FROM pg_inherits h WHERE h.inhparent = c.oid), ''))
	  FROM pg_class c
	 WHERE c.oid = to_regclass($1)`

// catalogCache keeps one dataset's catalog reads between its loads: the
// target's columns, the source's columns and, per partition, the children
// that may hold it. A load reads the target's fingerprint (versionSQL)
// instead, in the same round trip, and reads the catalog again when it
// changed. The source is not fingerprinted: a load failing with an error
// that says a table, column or type changed (stale) drops the cache.
type catalogCache struct {
	mu            sync.Mutex
	version       string
	target        table
	source        []string
	sourceTypes   []sourceType
	sourceRels    []uint32
	sourceVersion string
	parts         map[string]partChildren
	// settledFor keys the last evolve that altered nothing (the versions
	// and the policy): its changes and the source's columns it kept.
	settledFor     string
	settledChanges []SchemaChange
	settledSource  []string
	settledTypes   []sourceType
}

// sourceVersionSQL fingerprints the columns of the relations a source
// reads: their OIDs, numbers and row versions.
const sourceVersionSQL = `
	SELECT md5(coalesce(string_agg(a.attrelid::text || ':' || a.attnum::text || ':' || a.xmin::text, ',' ORDER BY a.attrelid, a.attnum), ''))
	  FROM pg_attribute a
	 WHERE a.attrelid = ANY ($1::oid[]) AND a.attnum > 0`

func (c *catalogCache) settledKey(pl *Plan, policy string) string {
	return pl.version + "/" + pl.sourceVersion + "/" + policy
}

// settled fills pl with the outcome of the last evolve of the same target,
// source and policy that altered nothing.
func (c *catalogCache) settled(pl *Plan, policy string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settledFor == "" || c.settledFor != c.settledKey(pl, policy) {
		return false
	}
	pl.changes = slices.Clone(c.settledChanges)
	pl.source, pl.sourceTypes = slices.Clone(c.settledSource), slices.Clone(c.settledTypes)
	return true
}

func (c *catalogCache) settle(pl *Plan, policy string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl.version == "" || pl.version != c.version {
		return
	}
	c.settledFor = c.settledKey(pl, policy)
	c.settledChanges = slices.Clone(pl.changes)
	c.settledSource, c.settledTypes = slices.Clone(pl.source), slices.Clone(pl.sourceTypes)
}

// partChildren is what the children read found for one partition.
type partChildren struct {
	strat, key, keyType string
	natts               int
	children            []child
}

// maxCachedParts bounds the children kept per dataset (a backfill loads
// many partitions once each): some hundred bytes each.
const maxCachedParts = 4096

func (c *catalogCache) drop() {
	c.mu.Lock()
	c.version, c.parts, c.settledFor = "", nil, ""
	c.mu.Unlock()
}

// describe queues the catalog reads of a load of p on b: the fingerprint,
// and the reads themselves when nothing is cached.
func (c *catalogCache) describe(b *pgx.Batch, spec Spec, p Params, withChildren bool, share *Plan) *Plan {
	pl := &Plan{target: &table{Table: spec.Target}, cache: c, spec: spec, params: p, withChildren: withChildren, versionOf: share}
	c.mu.Lock()
	cached := c.version != ""
	// Only a partitioned target has children to read.
	_, haveParts := c.parts[p.Partition]
	haveParts = haveParts || (cached && c.target.Kind != "p")
	rels := c.sourceRels
	c.mu.Unlock()
	if share == nil {
		b.Queue(versionSQL, spec.Target.ident()).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&pl.version); err != nil {
					return err
				}
			}
			return rows.Err()
		})
		if cached && len(rels) > 0 {
			// What the source returns changes with the tables it reads:
			// their fingerprint, in the same round trip.
			pl.sourceRels = rels
			b.Queue(sourceVersionSQL, rels).QueryRow(func(r pgx.Row) error { return r.Scan(&pl.sourceVersion) })
		}
	}
	switch {
	case !cached:
		pl.fresh = true
		pl.queueReads(b, true, withChildren, false)
	case withChildren && !haveParts:
		pl.freshParts = true
		pl.queueReads(b, false, true, false)
	}
	return pl
}

// resolve makes pl ready once its batch was read: from the cache when the
// fingerprint still matches, else by reading the catalog again in one more
// round trip.
func (pl *Plan) resolve(ctx context.Context, tx pgx.Tx) error {
	if pl.cache == nil {
		return nil
	}
	if err := pl.resolveCatalog(ctx, tx); err != nil {
		return err
	}
	return pl.evolve(ctx, tx, pl.spec.reserved())
}

func (pl *Plan) resolveCatalog(ctx context.Context, tx pgx.Tx) error {
	c := pl.cache
	if pl.versionOf != nil {
		// resolved first, in the same transaction
		pl.version, pl.sourceRels, pl.sourceVersion = pl.versionOf.version, pl.versionOf.sourceRels, pl.versionOf.sourceVersion
	}
	if pl.fresh {
		if err := pl.readSource(ctx, tx); err != nil {
			return err
		}
		c.store(pl)
		return nil
	}
	if c.fill(pl) {
		return nil
	}
	fresh, err := pl.readTarget(ctx, tx)
	if err != nil {
		return err
	}
	if err := fresh.readSource(ctx, tx); err != nil {
		return err
	}
	*pl = *fresh
	c.store(pl)
	return nil
}

// readTarget drops the cache and reads the target's catalog afresh in tx,
// in one round trip: a plan without the source's columns yet.
func (pl *Plan) readTarget(ctx context.Context, tx pgx.Tx) (*Plan, error) {
	if pl.cache != nil {
		pl.cache.drop()
	}
	fresh := &Plan{target: &table{Table: pl.spec.Target}, cache: pl.cache, spec: pl.spec, params: pl.params, withChildren: pl.withChildren, fresh: true, dry: pl.dry}
	b := &pgx.Batch{}
	b.Queue(versionSQL, pl.spec.Target.ident()).QueryRow(func(r pgx.Row) error {
		err := r.Scan(&fresh.version)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	fresh.queueReads(b, true, pl.withChildren, false)
	if err := send(ctx, tx, b); err != nil {
		return nil, err
	}
	return fresh, nil
}

// readSource reads the source's columns and the relations it reads, with
// their fingerprint, in one more round trip. The columns are described
// afresh (QueryExecModeDescribeExec): a statement a connection prepared
// before a source table changed would describe the old columns, or fail
// with "cached plan must not change result type".
func (pl *Plan) readSource(ctx context.Context, tx pgx.Tx) error {
	sql := "SELECT * FROM (" + pl.spec.Source + "\n) AS s LIMIT 0"
	rows, err := tx.Query(ctx, sql, pgx.QueryExecModeDescribeExec, pl.params.args())
	if err != nil {
		return err
	}
	pl.source, pl.sourceTypes = nil, nil
	for _, f := range rows.FieldDescriptions() {
		pl.source = append(pl.source, f.Name)
		pl.sourceTypes = append(pl.sourceTypes, sourceType{f.DataTypeOID, f.TypeModifier})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (VERBOSE, FORMAT JSON) "+sql, pgx.QueryExecModeDescribeExec, pl.params.args()).Scan(&plan); err != nil {
		return err
	}
	names := planRelations(plan)
	return tx.QueryRow(ctx, `
		WITH r AS (SELECT DISTINCT c.oid FROM unnest($1::text[]) AS n(name) JOIN pg_class c ON c.oid = to_regclass(n.name))
		SELECT coalesce((SELECT array_agg(oid ORDER BY oid) FROM r), '{}'),
		       (SELECT md5(coalesce(string_agg(a.attrelid::text || ':' || a.attnum::text || ':' || a.xmin::text, ',' ORDER BY a.attrelid, a.attnum), ''))
		          FROM pg_attribute a WHERE a.attrelid IN (SELECT oid FROM r) AND a.attnum > 0)`, names).Scan(&pl.sourceRels, &pl.sourceVersion)
}

// planRelations lists the relations an EXPLAIN (VERBOSE, FORMAT JSON)
// scans, schema-qualified and quoted.
func planRelations(plan []byte) []string {
	var root any
	if json.Unmarshal(plan, &root) != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch n := v.(type) {
		case []any:
			for _, e := range n {
				walk(e)
			}
		case map[string]any:
			rel, _ := n["Relation Name"].(string)
			schema, _ := n["Schema"].(string)
			if rel != "" && schema != "" {
				id := pgx.Identifier{schema, rel}.Sanitize()
				if !seen[id] {
					seen[id] = true
					out = append(out, id)
				}
			}
			for _, e := range n {
				walk(e)
			}
		}
	}
	walk(root)
	return out
}

// fill copies the cache into pl when pl's fingerprint matches it.
func (c *catalogCache) fill(pl *Plan) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl.version == "" || pl.version != c.version || pl.sourceVersion != c.sourceVersion {
		return false
	}
	t := c.target
	t.Columns = slices.Clone(t.Columns)
	pl.target, pl.source, pl.sourceTypes = &t, slices.Clone(c.source), slices.Clone(c.sourceTypes)
	if pl.withChildren && t.Kind == "p" {
		if pl.freshParts {
			c.keepParts(pl)
		} else if pc, ok := c.parts[pl.params.Partition]; ok {
			pl.partStrat, pl.partKey, pl.partKeyType, pl.partNatts, pl.children = pc.strat, pc.key, pc.keyType, pc.natts, slices.Clone(pc.children)
		} else {
			return false
		}
	}
	pl.cached = true
	return true
}

// store keeps what a fresh read found.
func (c *catalogCache) store(pl *Plan) {
	if pl.version == "" || pl.missing {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != pl.version {
		c.parts = nil
	}
	c.version = pl.version
	c.target = *pl.target
	c.target.Columns = slices.Clone(pl.target.Columns)
	c.source, c.sourceTypes = slices.Clone(pl.source), slices.Clone(pl.sourceTypes)
	c.sourceRels, c.sourceVersion = slices.Clone(pl.sourceRels), pl.sourceVersion
	if pl.withChildren && pl.target.Kind == "p" {
		c.keepParts(pl)
	}
}

func (c *catalogCache) keepParts(pl *Plan) {
	if c.parts == nil || len(c.parts) >= maxCachedParts {
		c.parts = map[string]partChildren{}
	}
	c.parts[pl.params.Partition] = partChildren{pl.partStrat, pl.partKey, pl.partKeyType, pl.partNatts, slices.Clone(pl.children)}
}

// stale reports an error a changed table, column or type explains (the
// cached description or a prepared statement no longer matches): the cache
// is dropped and, when the load used it, the error is retried rather than
// taken as the dataset's fault.
func (pl *Plan) stale(err error) error {
	var pgErr *pgconn.PgError
	if pl == nil || pl.cache == nil || !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case pgerrcode.UndefinedColumn, pgerrcode.UndefinedTable, pgerrcode.FeatureNotSupported, pgerrcode.DatatypeMismatch:
	default:
		return err
	}
	pl.cache.drop()
	if !pl.cached {
		return err
	}
	return &StaleCatalogError{Err: err}
}

// StaleCatalogError is a load that failed on a catalog description cached
// by an earlier load, which a change of the source's tables made wrong: the
// cache is dropped, and the load is worth retrying with a fresh read.
type StaleCatalogError struct{ Err error }

func (e *StaleCatalogError) Error() string {
	return "the source or target changed since idem read the catalog; retried with a fresh read: " + e.Err.Error()
}

func (e *StaleCatalogError) Unwrap() error { return e.Err }

// queueReads queues the catalog reads themselves: the target's columns and
// the source's (target), the children that may hold the partition (parts).
func (pl *Plan) queueReads(b *pgx.Batch, target, parts, source bool) {
	spec, p := pl.spec, pl.params
	if target {
		b.Queue(`
		SELECT c.oid, c.relkind::text, a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attgenerated <> '',
		       a.atthasdef, a.atttypid, a.atttypmod
		  FROM pg_class c
		  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		 WHERE c.oid = to_regclass($1)
		 ORDER BY a.attnum`, spec.Target.ident()).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var c column
				if err := rows.Scan(&pl.target.OID, &pl.target.Kind, &c.Name, &c.Type, &c.NotNull, &c.Generated, &c.HasDefault, &c.TypeOID, &c.TypMod); err != nil {
					return err
				}
				pl.target.Columns = append(pl.target.Columns, c)
			}
			pl.missing = len(pl.target.Columns) == 0
			return rows.Err()
		})
	}
	if source {
		// LIMIT 0 plans the source and returns its columns without reading a row.
		b.Queue("SELECT * FROM ("+spec.Source+"\n) AS s LIMIT 0", p.args()).Query(func(rows pgx.Rows) error {
			// A source that fails (1/0, a bad cast, a server going down) leaves
			// rows without a result: report the error, do not read the fields.
			if err := rows.Err(); err != nil {
				return err
			}
			for _, f := range rows.FieldDescriptions() {
				pl.source = append(pl.source, f.Name)
				pl.sourceTypes = append(pl.sourceTypes, sourceType{f.DataTypeOID, f.TypeModifier})
			}
			for rows.Next() {
			}
			return rows.Err()
		})
	}
	if parts {
		// Only children whose printed bound mentions the partition can hold
		// exactly it; filtering here keeps a 3-year daily table to one row.
		b.Queue(`
			SELECT pt.partstrat::text, pt.partnatts, ka.attname::text, format_type(ka.atttypid, ka.atttypmod),
			       n.nspname::text, ch.relname::text, pg_get_expr(ch.relpartbound, ch.oid)
			  FROM pg_partitioned_table pt
			  JOIN pg_attribute ka ON ka.attrelid = pt.partrelid AND ka.attnum = pt.partattrs[0]
			  JOIN pg_inherits i ON i.inhparent = pt.partrelid
			  JOIN pg_class ch ON ch.oid = i.inhrelid AND ch.relkind = 'r'
			  JOIN pg_namespace n ON n.oid = ch.relnamespace
			 WHERE pt.partrelid = to_regclass($1)
			   AND strpos(pg_get_expr(ch.relpartbound, ch.oid), $2) > 0`, spec.Target.ident(), p.Partition).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var c child
				if err := rows.Scan(&pl.partStrat, &pl.partNatts, &pl.partKey, &pl.partKeyType, &c.schema, &c.name, &c.bound); err != nil {
					return err
				}
				pl.children = append(pl.children, c)
			}
			return rows.Err()
		})
	}
}

// describe queues the catalog reads of a load of p on b, with no cache.
func describe(b *pgx.Batch, spec Spec, p Params, withChildren bool) *Plan {
	pl := &Plan{target: &table{Table: spec.Target}, spec: spec, params: p, withChildren: withChildren, fresh: true}
	pl.queueReads(b, true, withChildren, true)
	return pl
}

// checked returns the target and source columns, or the fatal error that
// the catalog implies (a missing table, a source returning a column twice).
func (pl *Plan) checked() (*table, []string, error) {
	t := pl.target
	if pl.missing {
		return nil, nil, &Error{Reason: schemas.ReasonUndefinedObject, Msg: fmt.Sprintf("table %s does not exist; create it or fix target in the config", t.Table)}
	}
	if t.Kind != "r" && t.Kind != "p" {
		return nil, nil, schemaErr("%s is not a table (relkind %s)", t.Table, t.Kind)
	}
	seen := map[string]bool{}
	for _, c := range pl.source {
		if seen[c] {
			return nil, nil, schemaErr("the source returns column %q twice; name each column once", c)
		}
		seen[c] = true
	}
	return t, pl.source, nil
}

// send runs a batch on tx and reads every result, running the callbacks.
func send(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	return tx.SendBatch(ctx, b).Close()
}

// insertColumns checks that every source column can be written to the target
// and returns them in source order. reserved columns (append_dedupe's
// bookkeeping) may not come from the source.
func insertColumns(t *table, src []string, reserved ...string) ([]string, error) {
	var unknown, generated, clash []string
	for _, c := range src {
		col, ok := t.column(c)
		switch {
		case slices.Contains(reserved, c):
			clash = append(clash, c)
		case !ok:
			unknown = append(unknown, c)
		case col.Generated:
			generated = append(generated, c)
		}
	}
	switch {
	case len(unknown) > 0:
		return nil, schemaErr("the source returns column(s) %s that %s does not have; add them to the table or leave them out of the source", strings.Join(unknown, ", "), t.Table)
	case len(generated) > 0:
		return nil, schemaErr("column(s) %s of %s are generated and cannot be loaded; leave them out of the source", strings.Join(generated, ", "), t.Table)
	case len(clash) > 0:
		return nil, schemaErr("the source returns %s, which idem fills itself; leave it out of the source", strings.Join(clash, ", "))
	}
	// Target columns the source leaves out get their defaults; a NOT NULL one
	// without a default fails with Postgres's own precise error (23502).
	return src, nil
}

func requireColumns(t *table, what string, names ...string) error {
	for _, n := range names {
		if _, ok := t.column(n); !ok {
			return schemaErr("%s %q is not a column of %s", what, n, t.Table)
		}
	}
	return nil
}

// hasUniqueIndex reports whether a unique, non-partial, non-deferrable index
// or constraint covers exactly cols: ON CONFLICT needs one as its arbiter, and
// without it a concurrent insert could double a key.
func hasUniqueIndex(ctx context.Context, tx pgx.Tx, t *table, cols []string) (bool, error) {
	rows, err := tx.Query(ctx, `
		SELECT array_agg(a.attname::text ORDER BY a.attname)
		  FROM pg_index i
		  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		 WHERE i.indrelid = $1 AND i.indisunique AND i.indimmediate AND i.indpred IS NULL
		   AND i.indexprs IS NULL
		 GROUP BY i.indexrelid`, t.OID)
	if err != nil {
		return false, err
	}
	sets, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return false, err
	}
	want := slices.Clone(cols)
	sort.Strings(want)
	for _, s := range sets {
		if slices.Equal(s, want) {
			return true, nil
		}
	}
	return false, nil
}

// Column is a column of a load's target: its name and its type as
// PostgreSQL writes it (format_type, e.g. "numeric(12,2)"), the form
// SchemaChange's types take.
type Column struct {
	Name, Type string
}

// TargetColumns returns the target's columns as the load pl describes
// left them, in the table's order: read in the load's transaction, and
// read again after a column its on_schema_change added or widened, so once
// that transaction commits they are the columns it committed. Nil until the
// load resolved its plan, or when the target does not exist.
func (pl *Plan) TargetColumns() []Column {
	if pl == nil || pl.target == nil || pl.missing || len(pl.target.Columns) == 0 {
		return nil
	}
	out := make([]Column, 0, len(pl.target.Columns))
	for _, c := range pl.target.Columns {
		out = append(out, Column{Name: c.Name, Type: c.Type})
	}
	return out
}
