package cli

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAuditWhyTellsAndExits(t *testing.T) {
	w := newCLIWorld(t)
	w.serve()
	require.NoError(t, w.run("publish", "orders", "2026-03-01", "--run-id", "r-7").e)
	w.db.Exec(t, "DELETE FROM staging.src WHERE event_date = '2026-03-04'")
	require.NoError(t, w.run("publish", "orders", "2026-03-04", "--run-id", "r1").e)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	require.Eventually(t, func() bool { return w.streamMsgs("IDEM_DLQ") == 1 }, 30*time.Second, 20*time.Millisecond)

	r := w.run("audit", "why", "orders", "2026-03-01")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "orders 2026-03-01 (pipeline shop)")
	require.Contains(t, r.out, "ledger: run r-7 won at")
	require.Contains(t, r.out, "msg-id orders:2026-03-01:r-7")
	require.Regexp(t, `(?m)^LOADED: loaded by run r-7 at \S+ \S+Z, 10 rows, no checks; nothing pending$`, r.out)

	r = w.run("audit", "why", "orders", "2026-03-04", "--json")
	require.Equal(t, 1, ExitCode(r.e))
	var story struct {
		DeadLetters []struct{ Seq uint64 } `json:"dead_letters"`
		Verdict     struct{ State, Line, Next string }
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &story), r.out)
	require.Equal(t, "dead_lettered", story.Verdict.State)
	require.Contains(t, story.Verdict.Line, "empty_source")
	require.Len(t, story.DeadLetters, 1)
	require.Equal(t, "idem dlq replay "+itoa(story.DeadLetters[0].Seq), story.Verdict.Next)

	r = w.run("audit", "why", "orders", "2026-03-04")
	require.Equal(t, 1, ExitCode(r.e))
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.True(t, strings.HasPrefix(lines[len(lines)-2], "DEAD LETTERED: dead-lettered "), r.out)
	require.Equal(t, "  "+story.Verdict.Next, lines[len(lines)-1], "the last line is the command to run")

	r = w.run("audit", "why", "orders", "2026-03-09")
	require.Equal(t, 3, ExitCode(r.e))
	require.Contains(t, r.out, "MISSING: no event has named this partition; to load it now:\n  idem backfill orders --from 2026-03-09 --to 2026-03-09\n")

	for _, args := range [][]string{
		{"audit", "why", "orders", "March"},
		{"audit", "why", "nope", "2026-03-01"},
		{"audit", "why", "orders"},
	} {
		require.Equal(t, 2, ExitCode(w.run(args...).e), "%v", args)
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// idem audit why lists the schema changes beside their attempts: a column
// notes (append_new_columns) added, and one orders (fail) refused, whose
// verdict names it, its fix and the replay; the fix and the replay load it.
func TestAuditWhyTellsSchemaChanges(t *testing.T) {
	w := newCLIWorld(t)
	cfg, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(w.cfg, append(cfg, `  notes:
    strategy: delete_insert
    target: analytics.n
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition
    on_schema_change: append_new_columns
`...), 0o600))
	w.db.Exec(t, `ALTER TABLE analytics.t DROP COLUMN note;
		CREATE TABLE analytics.n (id bigint, event_date date NOT NULL, amount numeric(12,2))`)
	w.serve()
	require.NoError(t, w.run("publish", "notes", "2026-03-05", "--run-id", "r1", "--wait").e)
	r := w.run("audit", "why", "notes", "2026-03-05")
	require.NoError(t, r.e, r.out)
	require.Regexp(t, `(?m)^        column note: new_column text, added \(append_new_columns\): ALTER TABLE "analytics"."n" ADD COLUMN "note" text$`, r.out)
	require.Regexp(t, `(?m)^LOADED: loaded by run r1 at \S+ \S+Z, 10 rows, no checks; added column note text \(append_new_columns\); nothing pending$`, r.out)

	require.NoError(t, w.run("publish", "orders", "2026-03-05", "--run-id", "r1").e)
	require.Eventually(t, func() bool { return w.streamMsgs("IDEM_DLQ") == 1 }, 30*time.Second, 20*time.Millisecond)
	r = w.run("audit", "why", "orders", "2026-03-05")
	require.Equal(t, 1, ExitCode(r.e), r.out)
	const ddl = `ALTER TABLE "analytics"."t" ADD COLUMN "note" text`
	require.Contains(t, r.out, "        column note: new_column text, refused (fail): on_schema_change is fail; fix: "+ddl+"\n")
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Regexp(t, `^DEAD LETTERED: dead-lettered \S+ \S+Z: schema_mismatch: new column note text \(on_schema_change: fail\); fix the target with `+
		regexp.QuoteMeta(ddl)+` or set on_schema_change: append_new_columns on orders, then:$`, lines[len(lines)-2])
	next := strings.TrimSpace(lines[len(lines)-1])
	require.Regexp(t, `^idem dlq replay \d+$`, next)

	// The verdict's fix, then its command.
	w.db.Exec(t, ddl)
	require.NoError(t, w.run(strings.Fields(next)[1:]...).e)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders' AND status = 'success'")
	r = w.run("audit", "why", "orders", "2026-03-05")
	require.NoError(t, r.e, r.out)
	require.Contains(t, r.out, "refused (fail)", "the refusal stays in the story, beside its attempt")
	require.Regexp(t, `(?m)^LOADED: loaded by run r1 at \S+ \S+Z, 10 rows, no checks; nothing pending$`, r.out)
}
