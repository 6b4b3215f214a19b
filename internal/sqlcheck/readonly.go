package sqlcheck

import "strings"

// writeKeywords begin or make a statement that is not a plain read: DML,
// DDL, permissions, maintenance, transaction control, and the locking
// clauses of SELECT (FOR UPDATE / SHARE).
var writeKeywords = map[string]bool{
	"insert": true, "update": true, "delete": true, "merge": true, "truncate": true, "upsert": true,
	"create": true, "drop": true, "alter": true, "grant": true, "revoke": true, "comment": true,
	"copy": true, "call": true, "do": true, "execute": true, "prepare": true, "deallocate": true,
	"vacuum": true, "analyze": true, "cluster": true, "reindex": true, "refresh": true, "lock": true,
	"listen": true, "notify": true, "unlisten": true, "discard": true, "reset": true, "checkpoint": true,
	"begin": true, "commit": true, "rollback": true, "savepoint": true, "release": true, "abort": true,
	"share": true, "security": true, "import": true, "load": true,
}

// sideEffectFunctions change something, wait, or reach outside the
// database when called from a read.
var sideEffectFunctions = map[string]bool{
	"nextval": true, "setval": true, "set_config": true, "pg_sleep": true, "pg_sleep_for": true, "pg_sleep_until": true,
	"pg_advisory_lock": true, "pg_advisory_xact_lock": true, "pg_try_advisory_lock": true, "pg_try_advisory_xact_lock": true,
	"pg_advisory_lock_shared": true, "pg_advisory_xact_lock_shared": true, "pg_advisory_unlock": true, "pg_advisory_unlock_all": true,
	"pg_notify": true, "pg_terminate_backend": true, "pg_cancel_backend": true, "pg_reload_conf": true, "pg_rotate_logfile": true,
	"pg_switch_wal": true, "pg_create_restore_point": true, "pg_promote": true, "pg_logical_emit_message": true,
	"lo_import": true, "lo_export": true, "lo_unlink": true, "lo_create": true, "lo_creat": true, "lo_put": true, "lo_from_bytea": true,
	"dblink": true, "dblink_exec": true, "dblink_send_query": true, "pg_file_write": true, "pg_read_file": true,
	"pg_read_binary_file": true, "txid_current": true, "pg_current_xact_id": true,
}

// NotARead lists what makes sql more than one read: a semicolon (a second
// statement), a keyword that writes, changes the schema or locks rows, and
// a call of a function with side effects. Like WallClock it looks at code
// only, never inside strings or comments, and a keyword used as a column
// label (t.lock, AS update) is not a finding. A function the lexer cannot
// see into (a user function that writes) is the EXPLAIN check's to find.
func NotARead(sql string) []Finding {
	toks := lex(sql)
	var out []Finding
	for i, t := range toks {
		switch t.kind {
		case kindPunct:
			if t.value == ";" {
				out = append(out, Finding{Name: "a semicolon (one statement only)", Offset: t.start})
			}
		case kindWord:
			lower := strings.ToLower(t.value)
			switch {
			case sideEffectFunctions[lower] && isCall(toks, i):
				f := qualifiedCall(sql, toks, i)
				f.Name = "calls " + f.Name + ", which has side effects"
				out = append(out, f)
			case writeKeywords[lower] && !isLabel(toks, i) && !isCall(toks, i):
				out = append(out, Finding{Name: strings.ToUpper(t.value) + " (a write, DDL or locking keyword)", Offset: t.start})
			}
		}
	}
	return out
}

// StartsWithSelect reports whether sql's first word, after any opening
// parentheses, is SELECT or WITH.
func StartsWithSelect(sql string) bool {
	for _, t := range lex(sql) {
		if t.kind == kindPunct && t.value == "(" {
			continue
		}
		w := strings.ToLower(t.value)
		return t.kind == kindWord && (w == "select" || w == "with")
	}
	return false
}
