package strategies

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/internal/sqlcheck"
)

// routeGroup is the route of a delete_insert load made with the other
// partitions of its group: one DELETE for all of them, then one INSERT …
// SELECT that reads the source once per partition through a LATERAL join.
const routeGroup = "group"

// QueueLoads queues on b the loads of ps, dps[i] describing ps[i]'s, for a
// caller that sends a group's loads in one round trip. The partitions'
// rows go in two statements whatever the group's size: one DELETE of
// every partition (partition_column = ANY), and, when the source's only
// parameter is @partition, one INSERT … SELECT over the partitions with
// the source joined LATERAL to each (route group). Another source, or a
// partition column whose type the statements cannot name, keeps the one
// DELETE and inserts each partition by its own statement, on its own
// route. Every row is checked against its partition as a load of one
// checks it, and each load's rows are counted for it alone.
//
// finish, given the batch's error, returns the group's: a stale
// description, or ErrEmptySource when a partition had no rows (the caller
// then loads each alone, and that one fails by itself).
func (s *DeleteInsert) QueueLoads(ctx context.Context, tx pgx.Tx, dps []*Plan, ps []Params, b *pgx.Batch) ([]*Result, func(error) error, error) {
	if len(dps) != len(ps) || len(ps) == 0 {
		return nil, nil, fmt.Errorf("delete_insert: a group of %d plans for %d partitions", len(dps), len(ps))
	}
	pls := make([]*deleteInsertPlan, len(ps))
	for i, dp := range dps {
		if err := dp.resolve(ctx, tx); err != nil {
			return nil, nil, err
		}
		pl, err := s.plan(dp, ps[i])
		if err != nil {
			return nil, nil, dp.stale(err)
		}
		pls[i] = pl
	}
	res := make([]*Result, len(ps))
	set, err := s.setStatements(ctx, tx, dps[0], pls[0])
	if err != nil {
		return nil, nil, dps[0].stale(err)
	}
	if set.del == "" {
		for i, pl := range pls {
			res[i] = &Result{Route: pl.route, Deleted: -1}
			pl.queue(b, ps[i], res[i])
		}
		return res, queuedFinish(dps[0], res, s.spec.AllowEmpty), nil
	}
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = p.Partition
	}
	lit := arrayLiteral(keys)
	for i, pl := range pls {
		res[i] = &Result{Route: pl.route}
		if set.ins != "" {
			res[i].Route = routeGroup
		}
	}
	b.Queue(set.del, pgx.NamedArgs{"idem_keys": lit}).Query(countInto(res, func(r *Result, n int64) { r.Deleted = n }))
	if set.ins == "" {
		for i, pl := range pls {
			r := res[i]
			b.Queue(pl.ins, ps[i].args()).Exec(func(ct pgconn.CommandTag) error { r.Inserted = ct.RowsAffected(); return nil })
		}
	} else {
		b.Queue(set.ins, pgx.NamedArgs{"idem_keys": lit, "idem_keys_source": lit, "idem_keys_check": lit, "idem_keys_text": lit}).
			Query(countInto(res, func(r *Result, n int64) { r.Inserted = n }))
	}
	return res, queuedFinish(dps[0], res, s.spec.AllowEmpty), nil
}

// countInto reads a group statement's answer, one row per partition that
// had rows (its 1-based place in the group, the count), into res.
func countInto(res []*Result, set func(*Result, int64)) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var i *int32
			var n int64
			if err := rows.Scan(&i, &n); err != nil {
				return err
			}
			if i == nil || *i < 1 || int(*i) > len(res) {
				return fmt.Errorf("delete_insert: a group statement counted %d rows of no partition of the group", n)
			}
			set(res[*i-1], n)
		}
		return rows.Err()
	}
}

// setStmts are a group's two statements; del "" when the partition
// column's type has no name the statements can use.
type setStmts struct{ del, ins string }

// paramTypes caches, per fingerprint of the source's relations, the type
// the server gives the source's @partition ("" when it has none the group
// statement can use).
type paramTypes struct {
	mu    sync.Mutex
	key   string
	typ   string
	known bool
}

// setStatements builds the group statements of the target and source dp
// describes.
func (s *DeleteInsert) setStatements(ctx context.Context, tx pgx.Tx, dp *Plan, pl *deleteInsertPlan) (setStmts, error) {
	pc := s.spec.PartitionColumn
	col, ok := dp.target.column(pc)
	if !ok {
		return setStmts{}, nil
	}
	target, ok := builtinType(tx, col.TypeOID)
	if !ok {
		return setStmts{}, nil
	}
	t := dp.target.Table.ident()
	qpc := q(pc)
	out := setStmts{del: "WITH idem_d AS (DELETE FROM " + t + " WHERE " + qpc + " = ANY (@idem_keys::" + target + "[]) RETURNING " + qpc + ")\n" +
		"SELECT array_position(@idem_keys::" + target + "[], idem_d." + qpc + "), count(*) FROM idem_d GROUP BY 1"}
	// The source's partition column, as the source returns it: the check
	// compares each row's value with its partition's in that type, as the
	// load of one partition does.
	var check string
	for i, c := range dp.source {
		if c == pc && i < len(dp.sourceTypes) {
			check, ok = builtinType(tx, dp.sourceTypes[i].oid)
		}
	}
	if check == "" || !ok {
		return out, nil
	}
	param, err := s.partitionParam(ctx, tx, dp)
	if err != nil || param == "" {
		return out, err
	}
	lateral, _ := sqlcheck.ReplaceParam(s.spec.Source, "partition", "idem_keys.idem_partition")
	selects := make([]string, len(pl.cols))
	for i, c := range pl.cols {
		selects[i] = "s." + q(c)
		if c == pc {
			selects[i] = "CASE WHEN s." + qpc + " = idem_keys.idem_check THEN s." + qpc +
				" ELSE idem.outside_partition(s." + qpc + ", idem_keys.idem_text) END"
		}
	}
	out.ins = "WITH idem_i AS (\nINSERT INTO " + t + " (" + quoteAll("", pl.cols) + ")\nSELECT " + strings.Join(selects, ", ") +
		"\n  FROM unnest(@idem_keys_source::" + param + "[], @idem_keys_check::" + check + "[], @idem_keys_text::pg_catalog.text[])" +
		" AS idem_keys(idem_partition, idem_check, idem_text)\n CROSS JOIN LATERAL (" + lateral + "\n) AS s\nRETURNING " + qpc + ")\n" +
		"SELECT array_position(@idem_keys::" + target + "[], idem_i." + qpc + "), count(*) FROM idem_i GROUP BY 1"
	return out, nil
}

// partitionParam is the type the server gives the source's @partition, as
// a name for a cast, when it is the source's only parameter and every
// "@partition" in the source is one (none inside a string or a comment);
// "" otherwise. The server is asked once per fingerprint of the source's
// relations.
func (s *DeleteInsert) partitionParam(ctx context.Context, tx pgx.Tx, dp *Plan) (string, error) {
	src := s.spec.Source
	names := sqlcheck.Params(src)
	positional, n := sqlcheck.ReplaceParam(src, "partition", "$1")
	if len(names) != 1 || names[0] != "partition" || n != strings.Count(src, "@partition") {
		return "", nil
	}
	key := dp.version + "/" + dp.sourceVersion
	pt := &s.ptypes
	pt.mu.Lock()
	typ, known := pt.typ, pt.known && pt.key == key
	pt.mu.Unlock()
	if known {
		return typ, nil
	}
	sd, err := tx.Conn().PgConn().Prepare(ctx, "", "SELECT * FROM (\n"+positional+"\n) AS s LIMIT 0", nil)
	if err != nil {
		return "", err
	}
	typ = ""
	if len(sd.ParamOIDs) == 1 {
		typ, _ = builtinType(tx, sd.ParamOIDs[0])
	}
	pt.mu.Lock()
	pt.key, pt.typ, pt.known = key, typ, true
	pt.mu.Unlock()
	return typ, nil
}

// builtinType names a type of pg_catalog for a cast (pg_catalog."date"),
// when oid is one the driver knows; false for any other (a domain, an enum).
func builtinType(tx pgx.Tx, oid uint32) (string, bool) {
	if oid == 0 || oid >= 16384 { // FirstNormalObjectId: below it, the system's own types
		return "", false
	}
	t, ok := tx.Conn().TypeMap().TypeForOID(oid)
	if !ok || t.Name == "" {
		return "", false
	}
	return "pg_catalog." + pgx.Identifier{t.Name}.Sanitize(), true
}

// arrayLiteral writes vs as a PostgreSQL array constant of quoted
// elements ({"a","b\"c"}), which the server reads into an array of the
// type its parameter is cast to, each element as it reads a parameter of
// that type.
func arrayLiteral(vs []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(v); j++ {
			if v[j] == '"' || v[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}
