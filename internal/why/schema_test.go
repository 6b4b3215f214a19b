package why

import (
	"strings"
	"testing"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/strategies"
)

// A dead letter's verdict names what its on_schema_change refused and
// the fix, on one line, whatever refused it and however many columns.
func TestVerdictNamesRefusedSchemaChanges(t *testing.T) {
	at := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	const table = `"analytics"."t"`
	add := func(col, policy, reason string) audit.SchemaChangeRow {
		return audit.SchemaChangeRow{AuditID: 2, RunID: "r2", SchemaChange: strategies.SchemaChange{Column: col, Change: strategies.ChangeNew,
			Action: strategies.ActionRefused, NewType: "text", Policy: policy, Reason: reason, DDL: "ALTER TABLE " + table + " ADD COLUMN " + col + " text"}}
	}
	for name, c := range map[string]struct {
		changes     []audit.SchemaChangeRow
		reason, fix string
	}{
		"fail": {[]audit.SchemaChangeRow{add("note", "fail", "on_schema_change is fail")},
			"schema_mismatch: new column note text (on_schema_change: fail)",
			"fix the target with ALTER TABLE " + table + " ADD COLUMN note text or set on_schema_change: append_new_columns on t"},
		"a role that may not alter": {[]audit.SchemaChangeRow{
			add("a", "append_new_columns", "idem's role may not alter the target"), add("b", "append_new_columns", "idem's role may not alter the target")},
			"schema_mismatch: new column a text, new column b text (on_schema_change: append_new_columns)",
			"idem's role may not alter the target; fix the target with ALTER TABLE " + table + " ADD COLUMN a text, ALTER TABLE " + table + " ADD COLUMN b text"},
		"narrowing": {[]audit.SchemaChangeRow{{AuditID: 2, SchemaChange: strategies.SchemaChange{Column: "amount", Change: strategies.ChangeRetyped,
			Action: strategies.ActionRefused, OldType: "bigint", NewType: "integer", Policy: "sync_all_columns", Reason: "sync_all_columns never narrows a column"}}},
			"schema_mismatch: amount is integer in the source, bigint in the target (on_schema_change: sync_all_columns)",
			"amount: sync_all_columns never narrows a column"},
		"many": {[]audit.SchemaChangeRow{add("a", "fail", "on_schema_change is fail"), add("b", "fail", "on_schema_change is fail"),
			add("c", "fail", "on_schema_change is fail"), add("d", "fail", "on_schema_change is fail"), add("e", "fail", "on_schema_change is fail")},
			"schema_mismatch: new column a text, new column b text, new column c text, 2 more (idem audit schema t --partition 2026-03-02) (on_schema_change: fail)",
			"fix the target with ALTER TABLE " + table + " ADD COLUMN a text, ALTER TABLE " + table + " ADD COLUMN b text, ALTER TABLE " + table +
				" ADD COLUMN c text, 2 more (idem audit schema t --partition 2026-03-02) or set on_schema_change: append_new_columns on t"},
	} {
		r := &Report{Dataset: "t", Partition: "2026-03-02", Story: audit.Story{Attempts: []audit.StoryAttempt{
			{ID: 2, RunID: "r2", Status: audit.StatusFailed, ErrorKind: audit.KindFatal, StartedAt: at, FinishedAt: &at},
			{ID: 1, RunID: "r1", Status: audit.StatusSuccess, StartedAt: at.Add(-time.Hour), FinishedAt: ptr(at.Add(-time.Hour))},
		}},
			DeadLetters: []deadletter.Letter{{Seq: 9, RunID: "r2", Kind: deadletter.KindFatal, FailedAt: at, Error: "schema_mismatch: the error's own text"}}}
		// Newest first, as the story reads them.
		for i := len(c.changes) - 1; i >= 0; i-- {
			r.SchemaChanges = append(r.SchemaChanges, c.changes[i])
		}
		v := decide(r)
		want := "dead-lettered 2026-03-02 10:00:00Z: " + c.reason + "; run r1's rows of 2026-03-02 09:00:00Z stay; " + c.fix + ", then:"
		if v.Line != want {
			t.Errorf("%s:\n got %s\nwant %s", name, v.Line, want)
		}
		if v.State != StateDeadLettered || v.Next != "idem dlq replay 9" {
			t.Errorf("%s: %s, next %q", name, v.State, v.Next)
		}
		if strings.ContainsAny(v.Line, "\n\r") {
			t.Errorf("%s: more than one line", name)
		}
	}
	// A schema_mismatch whose changes were not recorded keeps its error.
	r := &Report{Dataset: "t", Partition: "2026-03-02",
		Story:       audit.Story{Attempts: []audit.StoryAttempt{{ID: 2, RunID: "r2", Status: audit.StatusFailed, ErrorKind: audit.KindFatal, StartedAt: at, FinishedAt: &at}}},
		DeadLetters: []deadletter.Letter{{Seq: 9, RunID: "r2", Kind: deadletter.KindFatal, FailedAt: at, Error: "schema_mismatch: column x of relation t does not exist"}}}
	if v, want := decide(r).Line, "dead-lettered 2026-03-02 10:00:00Z: schema_mismatch: column x of relation t does not exist; fix the event, the source or the target, then:"; v != want {
		t.Errorf("unrecorded:\n got %s\nwant %s", v, want)
	}
}

// A load's verdict names the columns it added or widened, and only those
// it made: one another load made first is not.
func TestVerdictNamesTheColumnsALoadMade(t *testing.T) {
	at := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	rows := int64(4)
	r := &Report{Dataset: "t", Partition: "2026-03-02", Story: audit.Story{
		Attempts: []audit.StoryAttempt{{ID: 5, RunID: "r1", Status: audit.StatusSuccess, Rows: &rows, StartedAt: at, FinishedAt: &at}},
		SchemaChanges: []audit.SchemaChangeRow{
			{AuditID: 5, SchemaChange: strategies.SchemaChange{Column: "tag", Change: strategies.ChangeNew, Action: strategies.ActionFound, NewType: "text", Policy: "sync_all_columns"}},
			{AuditID: 5, SchemaChange: strategies.SchemaChange{Column: "amount", Change: strategies.ChangeRetyped, Action: strategies.ActionWidened, OldType: "integer", NewType: "bigint", Policy: "sync_all_columns"}},
			{AuditID: 5, SchemaChange: strategies.SchemaChange{Column: "note", Change: strategies.ChangeNew, Action: strategies.ActionAdded, NewType: "text", Policy: "sync_all_columns"}},
			{AuditID: 4, SchemaChange: strategies.SchemaChange{Column: "old", Change: strategies.ChangeNew, Action: strategies.ActionAdded, NewType: "text", Policy: "sync_all_columns"}},
		}}}
	want := "loaded by run r1 at 2026-03-02 10:00:00Z, 4 rows, no checks; added column note text, widened column amount from integer to bigint (sync_all_columns); nothing pending"
	if v := decide(r); v.Line != want {
		t.Errorf("got  %s\nwant %s", v.Line, want)
	}
}

func ptr[T any](v T) *T { return &v }
