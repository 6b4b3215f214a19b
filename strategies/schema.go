package strategies

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/schemas"
)

// What a load does when the source's columns differ from the target's
// (Spec.OnSchemaChange). The default is OnSchemaChangeFail.
const (
	// OnSchemaChangeFail refuses a source column the target lacks, as a
	// fatal schema_mismatch listing every difference and the ALTER TABLE
	// that would fix it. Other differences load as they always did.
	OnSchemaChangeFail = "fail"
	// OnSchemaChangeIgnore loads the columns both sides have: a new source
	// column is left out, a target column the source lacks gets its default.
	OnSchemaChangeIgnore = "ignore"
	// OnSchemaChangeAppend adds a new source column to the target, with the
	// source's type, inside the load's transaction.
	OnSchemaChangeAppend = "append_new_columns"
	// OnSchemaChangeSync also widens a target column to the source's wider
	// type of the same family, and refuses a change that would narrow or
	// convert one.
	OnSchemaChangeSync = "sync_all_columns"
)

// SchemaPolicies lists the on_schema_change values, the default first.
func SchemaPolicies() []string {
	return []string{OnSchemaChangeFail, OnSchemaChangeIgnore, OnSchemaChangeAppend, OnSchemaChangeSync}
}

// Kinds of difference (SchemaChange.Change).
const (
	ChangeNew     = "new_column"     // the source returns a column the target lacks
	ChangeRetyped = "retyped"        // the source's type of a column differs from the target's
	ChangeMissing = "missing_column" // a target column without a default that the source no longer returns
)

// What a load did with a difference (SchemaChange.Action).
const (
	ActionAdded   = "added"   // ALTER TABLE ... ADD COLUMN, committed with the load
	ActionWidened = "widened" // ALTER TABLE ... ALTER COLUMN ... TYPE, committed with the load
	ActionIgnored = "ignored" // loaded without it
	ActionKept    = "kept"    // a missing column stays in the target, NULL in new rows
	ActionRefused = "refused" // the load failed on it (fatal)
	ActionFound   = "found"   // another load made the same change first
)

// SchemaChange is one difference between the columns a load's source
// returned and its target's, and what the load did with it.
type SchemaChange struct {
	Column string `json:"column"`
	Change string `json:"change"`
	Action string `json:"action"`
	// OldType is the target's type, NewType the source's ("" when the
	// column is not on that side).
	OldType string `json:"old_type,omitempty"`
	NewType string `json:"new_type,omitempty"`
	Policy  string `json:"policy"`
	// DDL is the statement the load ran, or the one that would fix a
	// refusal.
	DDL string `json:"ddl,omitempty"`
	// Reason says why a change was refused.
	Reason string `json:"reason,omitempty"`
}

// Made reports a change idem applied to the target (added or widened).
func (c SchemaChange) Made() bool { return c.Action == ActionAdded || c.Action == ActionWidened }

// Difference says what differs, in the words of a refusal: "new column
// note text", "amount is bigint in the source, integer in the target",
// "note text is not returned by the source".
func (c SchemaChange) Difference() string {
	switch c.Change {
	case ChangeNew:
		return fmt.Sprintf("new column %s %s", c.Column, c.NewType)
	case ChangeRetyped:
		return fmt.Sprintf("%s is %s in the source, %s in the target", c.Column, c.NewType, c.OldType)
	default:
		return fmt.Sprintf("%s %s is not returned by the source", c.Column, c.OldType)
	}
}

// SchemaChangeError is a load refused by its dataset's on_schema_change:
// fatal (schema_mismatch), with every difference it found.
type SchemaChangeError struct {
	Err     *Error
	Changes []SchemaChange
}

func (e *SchemaChangeError) Error() string { return e.Err.Error() }
func (e *SchemaChangeError) Unwrap() error { return e.Err }

// Fatal marks the error as not worth retrying.
func (e *SchemaChangeError) Fatal() bool { return true }

// FatalReason is schema_mismatch, for the dead letter's Idem-Error-Reason.
func (e *SchemaChangeError) FatalReason() string { return e.Err.Reason }

// SchemaChanges returns the differences the load that pl describes met and
// what it did with each, once it ran (nil when the columns matched).
func (pl *Plan) SchemaChanges() []SchemaChange {
	if pl == nil {
		return nil
	}
	return pl.changes
}

// reserved are the columns idem fills itself (append_dedupe's).
func (s Spec) reserved() []string {
	var out []string
	for _, c := range []string{s.RunIDColumn, s.LoadSeqColumn} {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// Policy returns the dataset's on_schema_change, the default when unset.
func (s Spec) Policy() string {
	if s.OnSchemaChange == "" {
		return OnSchemaChangeFail
	}
	return s.OnSchemaChange
}

// diff compares the source's columns with the target's: the new columns,
// the retyped ones (with how their types compare) and the target's
// columns, without a default, the source does not return. Reserved
// columns (append_dedupe's bookkeeping) and generated ones are never
// differences.
type diffCol struct {
	name  string
	i     int // the source's index, -1 for a missing column
	tgt   column
	order typeOrder
}

func (pl *Plan) diff(reserved []string) (out []diffCol) {
	t := pl.target
	for i, name := range pl.source {
		if slices.Contains(reserved, name) {
			continue
		}
		col, ok := t.column(name)
		if !ok {
			out = append(out, diffCol{name: name, i: i})
			continue
		}
		if col.Generated || i >= len(pl.sourceTypes) {
			continue
		}
		if o := compareTypes(pl.sourceTypes[i], col); o != typeSame {
			out = append(out, diffCol{name: name, i: i, tgt: col, order: o})
		}
	}
	for _, col := range t.Columns {
		if col.Generated || col.HasDefault || slices.Contains(reserved, col.Name) || slices.Contains(pl.source, col.Name) {
			continue
		}
		out = append(out, diffCol{name: col.Name, i: -1, tgt: col})
	}
	return out
}

// typeOrder is how a source column's type compares with its target's.
type typeOrder int

const (
	typeSame     typeOrder = iota // equal, or the source's modifier is unknown
	typeWider                     // same family, the source holds more: the target can be widened
	typeNarrower                  // same family, the source holds less
	typeOther                     // another family, or a change PostgreSQL makes only with a conversion
)

// Type OIDs of the families idem widens.
const (
	oidInt2    = 21
	oidInt4    = 23
	oidInt8    = 20
	oidFloat4  = 700
	oidFloat8  = 701
	oidNumeric = 1700
	oidText    = 25
	oidVarchar = 1043
)

func intRank(oid uint32) int {
	switch oid {
	case oidInt2:
		return 1
	case oidInt4:
		return 2
	case oidInt8:
		return 3
	}
	return 0
}

// compareTypes compares a source column's type with its target column's.
// A modifier the source does not know (-1, as an expression gives) is not
// a difference: the value is cast on assignment, as it always was.
func compareTypes(s sourceType, t column) typeOrder {
	if t.TypeOID == 0 || (s.oid == t.TypeOID && (s.typmod == t.TypMod || s.typmod < 0 && s.oid == oidNumeric)) {
		return typeSame
	}
	rank := func(a, b int) typeOrder {
		switch {
		case a == b:
			return typeSame
		case a > b:
			return typeWider
		}
		return typeNarrower
	}
	switch {
	case intRank(s.oid) > 0 && intRank(t.TypeOID) > 0:
		return rank(intRank(s.oid), intRank(t.TypeOID))
	case (s.oid == oidFloat4 || s.oid == oidFloat8) && (t.TypeOID == oidFloat4 || t.TypeOID == oidFloat8):
		return rank(int(s.oid), int(t.TypeOID))
	case s.oid == oidNumeric && t.TypeOID == oidNumeric:
		// numeric(p,s): typmod-4 is p<<16 | s; -1 is unconstrained.
		if t.TypMod < 0 {
			return typeNarrower
		}
		sp, ss := (s.typmod-4)>>16, (s.typmod-4)&0xffff
		tp, ts := (t.TypMod-4)>>16, (t.TypMod-4)&0xffff
		if ss != ts {
			return typeOther // a new scale rounds or rewrites every value
		}
		return rank(int(sp), int(tp))
	case (s.oid == oidText || s.oid == oidVarchar) && (t.TypeOID == oidText || t.TypeOID == oidVarchar):
		// text and varchar without a length hold any string.
		width := func(oid uint32, typmod int32) int {
			if oid == oidText || typmod < 0 {
				return 1 << 30
			}
			return int(typmod - 4)
		}
		return rank(width(s.oid, s.typmod), width(t.TypeOID, t.TypMod))
	}
	return typeOther
}

// evolve applies the dataset's on_schema_change to what resolve found,
// before any statement is built from the column lists: it fails, leaves
// new source columns out, or alters the target in tx and reads its catalog
// again. What it met and did is kept on pl (SchemaChanges); a difference
// that changes nothing (a retyped column loaded with a cast, as always) is
// listed only in a refusal's message. Outcomes that alter nothing are
// cached with the catalog, so a lasting difference costs no round trip.
func (pl *Plan) evolve(ctx context.Context, tx pgx.Tx, reserved []string) error {
	pl.changes = nil
	if pl.missing || pl.target == nil {
		return nil
	}
	policy := pl.spec.Policy()
	if pl.cache != nil && pl.cache.settled(pl, policy) {
		return nil
	}
	diffs := pl.diff(reserved)
	if len(diffs) == 0 {
		return nil
	}
	names, err := pl.typeNames(ctx, tx, diffs)
	if err != nil {
		return err
	}
	t := pl.target
	var all, refused, alter []SchemaChange
	for k, d := range diffs {
		c := SchemaChange{Column: d.name, Policy: policy, NewType: names[k]}
		switch {
		case d.i < 0:
			c.Change, c.OldType, c.NewType, c.Action = ChangeMissing, d.tgt.Type, "", ActionKept
		case d.tgt.Name == "":
			c.Change = ChangeNew
			c.DDL = "ALTER TABLE " + t.ident() + " ADD COLUMN " + q(d.name) + " " + names[k]
			switch policy {
			case OnSchemaChangeFail:
				c.Action, c.Reason = ActionRefused, "on_schema_change is fail"
			case OnSchemaChangeIgnore:
				c.Action, c.DDL = ActionIgnored, ""
			default:
				c.Action = ActionAdded
				if !addable(pl.sourceTypes[d.i].oid) {
					c.Action, c.DDL = ActionRefused, ""
					c.Reason = fmt.Sprintf("the source's type %s cannot be a column's type; cast it in the source", names[k])
				}
			}
		default:
			c.Change, c.OldType, c.Action = ChangeRetyped, d.tgt.Type, ActionIgnored
			c.DDL = "ALTER TABLE " + t.ident() + " ALTER COLUMN " + q(d.name) + " TYPE " + names[k]
			if policy == OnSchemaChangeSync {
				switch d.order {
				case typeWider:
					c.Action = ActionWidened
				case typeNarrower:
					c.Action, c.DDL = ActionRefused, ""
					c.Reason = fmt.Sprintf("sync_all_columns never narrows a column: %s keeps %s where the source returns %s; cast it in the source or choose another on_schema_change", t.Table, d.tgt.Type, names[k])
				default:
					c.Action, c.DDL = ActionRefused, ""
					c.Reason = fmt.Sprintf("%s to %s is not a widening PostgreSQL makes without converting every value; change the column yourself or cast it in the source", d.tgt.Type, names[k])
				}
			}
		}
		all = append(all, c)
		switch {
		case c.Action == ActionRefused:
			refused = append(refused, c)
		case c.Made():
			alter = append(alter, c)
		}
		// Worth recording: what was refused or made, a new column left
		// out, and, where the target follows the source, a kept column.
		if c.Action == ActionRefused || c.Made() || c.Change == ChangeNew || c.Change == ChangeMissing && policy == OnSchemaChangeSync {
			pl.changes = append(pl.changes, c)
		}
	}
	if len(refused) > 0 {
		return pl.refusal(all, refused)
	}
	if len(alter) > 0 && !pl.dry {
		return pl.alter(ctx, tx, alter)
	}
	if len(alter) > 0 {
		// A prediction says too when idem's role could not make it.
		if err := pl.mayAlter(ctx, tx); err != nil {
			return err
		}
	}
	pl.leaveOut(reserved)
	if pl.cache != nil && len(alter) == 0 {
		pl.cache.settle(pl, policy)
	}
	return nil
}

// leaveOut drops from the source's columns those the target lacks.
func (pl *Plan) leaveOut(reserved []string) {
	var src []string
	var types []sourceType
	for i, name := range pl.source {
		if _, ok := pl.target.column(name); ok || slices.Contains(reserved, name) {
			src = append(src, name)
			if i < len(pl.sourceTypes) {
				types = append(types, pl.sourceTypes[i])
			}
		}
	}
	pl.source, pl.sourceTypes = src, types
}

// addable reports a type a table column may have: not a pseudo-type such
// as record or unknown.
func addable(oid uint32) bool {
	switch oid {
	case 2249, 705, 2278, 2283, 2776, 3500: // record, unknown, void, anyelement, anynonarray, anyenum
		return false
	}
	return oid != 0
}

// refusal is the fatal error for refused changes, listing every difference.
func (pl *Plan) refusal(all, refused []SchemaChange) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the source's columns differ from %s (on_schema_change: %s):", pl.target.Table, pl.spec.Policy())
	var fixes []string
	for _, c := range all {
		b.WriteString(" " + c.Difference())
		if c.Change == ChangeMissing {
			b.WriteString(" (NULL in new rows)")
		}
		b.WriteString(";")
		if c.Action == ActionRefused && c.DDL != "" {
			fixes = append(fixes, c.DDL)
		}
	}
	for _, c := range refused {
		if c.Reason != "" && c.DDL == "" {
			fmt.Fprintf(&b, " %s: %s;", c.Column, c.Reason)
		}
	}
	msg := strings.TrimSuffix(b.String(), ";")
	if len(fixes) > 0 {
		msg += ". Fix it with: " + strings.Join(fixes, "; ") + "; or set on_schema_change: append_new_columns on the dataset; then replay its dead letters: idem dlq replay --reason schema_mismatch " + pl.spec.Dataset
	}
	return &SchemaChangeError{Err: &Error{Reason: schemas.ReasonSchemaMismatch, Msg: msg}, Changes: pl.changes}
}

// typeNames names the source's types of the differing columns, as
// PostgreSQL writes them (format_type), in diffs' order.
func (pl *Plan) typeNames(ctx context.Context, tx pgx.Tx, diffs []diffCol) ([]string, error) {
	oids := make([]uint32, len(diffs))
	mods := make([]int32, len(diffs))
	for k, d := range diffs {
		if d.i >= 0 && d.i < len(pl.sourceTypes) {
			oids[k], mods[k] = pl.sourceTypes[d.i].oid, pl.sourceTypes[d.i].typmod
		}
	}
	rows, err := tx.Query(ctx, `SELECT coalesce(format_type(nullif(o, 0), m), '') FROM unnest($1::oid[], $2::int4[]) WITH ORDINALITY AS u(o, m, n) ORDER BY n`, oids, mods)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// alter makes the changes in tx: it locks the target (waiting at most
// LockTimeout: a lock it cannot get is transient), reads its columns again
// so a change another load committed meanwhile is found rather than made
// twice, runs the ALTERs still needed and reads the catalog again. The DDL
// commits with the load or not at all.
func (pl *Plan) alter(ctx context.Context, tx pgx.Tx, changes []SchemaChange) error {
	t := pl.target
	if err := pl.mayAlter(ctx, tx); err != nil {
		return err
	}
	b := &pgx.Batch{}
	queueLockTimeout(b)
	b.Queue("LOCK TABLE " + t.ident() + " IN SHARE ROW EXCLUSIVE MODE")
	restoreLockTimeout(b)
	if err := send(ctx, tx, b); err != nil {
		return pl.alterErr(err)
	}
	now, err := pl.reread(ctx, tx)
	if err != nil {
		return err
	}
	b = &pgx.Batch{}
	queueLockTimeout(b)
	n := 0
	for k, c := range changes {
		col, ok := now.target.column(c.Column)
		if ok && (c.Change == ChangeNew || col.Type == c.NewType) {
			changes[k].Action = ActionFound
			continue
		}
		if c.Change == ChangeRetyped && pl.spec.View.Name != "" && n == 0 {
			// append_dedupe's view reads the column: PostgreSQL retypes
			// no column a view uses. It is made again in this
			// transaction (AppendDedupe.resolve), so no reader sees it
			// missing.
			b.Queue("DROP VIEW IF EXISTS " + pl.spec.View.ident())
		}
		b.Queue(c.DDL)
		n++
	}
	restoreLockTimeout(b)
	if n > 0 {
		if err := send(ctx, tx, b); err != nil {
			return pl.alterErr(err)
		}
		if now, err = pl.reread(ctx, tx); err != nil {
			return err
		}
	}
	for _, c := range changes {
		for k := range pl.changes {
			if pl.changes[k].Column == c.Column && pl.changes[k].Change == c.Change {
				pl.changes[k].Action = c.Action
			}
		}
	}
	kept := pl.changes
	*pl = *now
	pl.changes, pl.altered = kept, n > 0
	return nil
}

// reread reads the target's catalog afresh in tx, dropping the cache: the
// plan the load then runs.
func (pl *Plan) reread(ctx context.Context, tx pgx.Tx) (*Plan, error) {
	fresh, err := pl.readTarget(ctx, tx)
	if err != nil {
		return nil, err
	}
	fresh.source, fresh.sourceTypes = pl.source, pl.sourceTypes
	fresh.sourceRels, fresh.sourceVersion = pl.sourceRels, pl.sourceVersion
	if fresh.cache != nil {
		fresh.cache.store(fresh)
	}
	return fresh, nil
}

// mayAlter returns the fatal error of a role that may not alter the
// target: only its owner, or a member of the owner's role, may.
func (pl *Plan) mayAlter(ctx context.Context, tx pgx.Tx) error {
	var owner, self string
	var may, inherits bool
	if err := tx.QueryRow(ctx, `SELECT pg_get_userbyid(c.relowner), current_user, pg_has_role(c.relowner, 'USAGE'), r.rolinherit
	    FROM pg_class c, pg_roles r WHERE c.oid = $1::regclass AND r.rolname = current_user`, pl.target.ident()).Scan(&owner, &self, &may, &inherits); err != nil || may {
		return err
	}
	fix := "GRANT " + pgx.Identifier{owner}.Sanitize() + " TO " + pgx.Identifier{self}.Sanitize()
	if !inherits {
		// A NOINHERIT role does not use its memberships' privileges, and
		// ownership is one of them.
		fix = "ALTER TABLE " + pl.target.ident() + " OWNER TO " + pgx.Identifier{self}.Sanitize() + " (" + self + " is NOINHERIT: membership of " + owner + " is not enough)"
	}
	return pl.refused(fmt.Sprintf("on_schema_change %s needs to alter %s, which only its owner %s (or a role that inherits it) may, and idem runs as %s: %s, see deploy/postgres/grants.sql; or make the change yourself",
		pl.spec.Policy(), pl.target.Table, owner, self, fix))
}

// refused is a schema change the load cannot make, fatal: the dataset's
// dead letters wait for the fix and are replayed by reason.
func (pl *Plan) refused(msg string) error {
	msg += "; then replay its dead letters: idem dlq replay --reason schema_mismatch " + pl.spec.Dataset
	for k := range pl.changes {
		if pl.changes[k].Made() {
			pl.changes[k].Action, pl.changes[k].Reason = ActionRefused, "idem's role may not alter the target"
		}
	}
	return &SchemaChangeError{Err: &Error{Reason: schemas.ReasonSchemaMismatch, Msg: msg}, Changes: pl.changes}
}

// alterErr explains why the DDL failed: a lock not granted in time
// (transient: retried later), or a role that may not alter the target.
func (pl *Plan) alterErr(err error) error {
	if isLockTimeout(err) {
		return fmt.Errorf("on_schema_change %s: %s is in use and its lock was not granted within %s, so its readers are not stalled behind the change; the load is retried later: %w",
			pl.spec.Policy(), pl.target.Table, LockTimeout, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
		return pl.refused(fmt.Sprintf("on_schema_change %s needs to alter %s, and idem's role may not: %v; see deploy/postgres/grants.sql",
			pl.spec.Policy(), pl.target.Table, err))
	}
	return err
}
