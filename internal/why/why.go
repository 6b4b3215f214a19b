// Package why tells one partition's whole story and ends it with a
// verdict and the next command: what `idem audit why`, the status page's
// cell and GET /api/v1/datasets/{d}/partitions/{p} show. It reads the
// audit (attempts, checks, schema changes, the ledger, the outbox, operator
// actions), the events stream (each event an attempt names) and the
// dead-letter stream, and decides nothing about any message: it only reads.
package why

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/strategies"
)

// Verdict states, and the exit code of `idem audit why` for each, as
// `idem publish --wait`'s: 0 done, 1 failed for good (a person must act),
// 3 not finished yet, 4 something could not be read.
const (
	StateLoaded       = "loaded"
	StateProvisional  = "provisional"
	StateOutdated     = "outdated" // loaded, under an older definition
	StateLoading      = "loading"
	StateWaiting      = "waiting"
	StateRetrying     = "retrying"
	StateRejected     = "rejected"
	StateRetracted    = "retracted" // emptied on purpose by an operator
	StateDeadLettered = "dead_lettered"
	StateMissing      = "missing"
	// StatePaused: not loaded, and its dataset is paused (`idem pause`).
	StatePaused = "paused"
	// StateCancelled: its latest run was a cancelled backfill, and no
	// load came before it.
	StateCancelled = "cancelled"
	StateUnknown   = "unknown"
)

// Exit is the exit code for a state.
func Exit(state string) int {
	switch state {
	case StateLoaded, StateProvisional, StateOutdated, StateRetracted:
		return 0
	case StateRejected, StateDeadLettered:
		return 1
	case StateUnknown:
		return 4
	default:
		return 3
	}
}

// Event is one message of the events stream that named the partition.
type Event struct {
	Seq       uint64    `json:"stream_seq"`
	MsgID     string    `json:"msg_id,omitempty"`
	RunID     string    `json:"run_id"`
	Force     bool      `json:"force"`
	Published time.Time `json:"published_at"`
	// TraceID is the publisher's W3C trace id, when it sent one.
	TraceID string `json:"trace_id,omitempty"`
	// Publisher is who published it, when the event says (an attribute
	// such as triggered_by or the Nats-Msg-Id's scheme).
	Publisher string `json:"published_by,omitempty"`
	// Gone: the stream no longer holds it (its age limit, a purge).
	Gone bool `json:"gone,omitempty"`
}

// Upstream is one dataset whose then: triggers this one, with its latest
// attempt at the same partition.
type Upstream struct {
	Dataset    string     `json:"dataset"`
	Status     string     `json:"status"` // "" when it never ran for this partition
	RunID      string     `json:"run_id,omitempty"`
	FinishedAt *time.Time `json:"finished_at"`
	// Triggered: a load of this upstream triggered one of the attempts.
	Triggered bool `json:"triggered"`
}

// Expected is a calendar dataset's expectation of the partition.
type Expected struct {
	Due  time.Time `json:"due"`
	Late bool      `json:"late"`
	// Ended: the partition's period is over, so an event is expected.
	Ended bool `json:"ended"`
}

// Verdict is the one line the story ends with.
type Verdict struct {
	State string `json:"state"`
	Line  string `json:"line"`
	// Next is the command that fixes or follows it; empty when nothing
	// is to be done.
	Next string `json:"next,omitempty"`
	Exit int    `json:"exit"`
}

// Report is a partition's story.
type Report struct {
	Pipeline    string              `json:"pipeline"`
	Dataset     string              `json:"dataset"`
	Partition   string              `json:"partition"`
	At          time.Time           `json:"at"`
	Events      []Event             `json:"events"`
	DeadLetters []deadletter.Letter `json:"dead_letters"`
	audit.Story
	Upstreams []Upstream `json:"upstreams"`
	Expected  *Expected  `json:"expected,omitempty"`
	// ProvisionalUntil, while the dataset's recheck window holds the
	// partition, is when its load becomes final.
	ProvisionalUntil *time.Time `json:"provisional_until,omitempty"`
	// RecheckEvery is the dataset's recheck period, for the verdict.
	RecheckEvery time.Duration `json:"-"`
	// Outdated, when the latest load ran another definition than the
	// current one: which, and the fields changed since.
	Outdated *Outdated `json:"outdated,omitempty"`
	// Notes say what could not be read; the verdict stands on the rest.
	Notes   []string `json:"notes,omitempty"`
	Verdict Verdict  `json:"verdict"`
}

// Streams reads NATS: an event of the events stream by sequence, and the
// dataset's dead letters. Nil: NATS is not read (notes say so).
type Streams interface {
	Event(ctx context.Context, seq uint64) (Event, error)
	DeadLetters(ctx context.Context, dataset string) ([]deadletter.Letter, error)
}

// Sources is what a story is read from.
type Sources struct {
	Pipeline string
	DB       audit.Beginner
	// Audit reads upstream attempts; it is usually DB itself.
	Audit   audit.Querier
	Streams Streams
	Now     func() time.Time
}

// Dataset is what the story needs of the dataset's configuration.
type Dataset struct {
	Name      string
	Upstreams []string
	// Calendar, when set, says when the partition is expected.
	Calendar *calendar.Expect
	// Recheck, when set (recheck:), says how long a load stays
	// provisional.
	Recheck *Recheck
	// Definition is the hash of the dataset's current definition, and
	// DefinitionJSON the definition; a load under another is outdated.
	Definition     string
	DefinitionJSON []byte
}

// Recheck is a dataset's recheck: its window and period.
type Recheck struct {
	Window calendar.Window
	Every  time.Duration
}

// Limits of one story.
const (
	maxAttempts = 50
	maxEvents   = 20
)

// ErrNoStory is what Tell returns, wrapped, when the database cannot be
// read: the verdict would be a guess.
var ErrNoStory = errors.New("why: the audit could not be read")

// Tell reads the partition's story and decides its verdict.
func Tell(ctx context.Context, src Sources, ds Dataset, partition string) (Report, error) {
	now := time.Now
	if src.Now != nil {
		now = src.Now
	}
	r := Report{Pipeline: src.Pipeline, Dataset: ds.Name, Partition: partition, At: now().UTC(),
		Events: []Event{}, DeadLetters: []deadletter.Letter{}, Upstreams: []Upstream{}}
	// The dead letters are read before the audit: a failure is recorded
	// before its message is dead-lettered, so every dead letter read here
	// finds its failed attempt below, never a `started` one.
	readDeadLetters(ctx, src.Streams, &r)
	st, err := audit.ReadStory(ctx, src.DB, src.Pipeline, ds.Name, partition, maxAttempts)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrNoStory, err)
	}
	r.Story = st
	if st.Truncated {
		r.Notes = append(r.Notes, fmt.Sprintf("only the newest %d attempts are shown", maxAttempts))
	}
	if st.SchemaChangesTruncated {
		r.Notes = append(r.Notes, fmt.Sprintf("only the newest %d schema changes are shown: idem audit schema %s --partition %s lists them all",
			maxAttempts, arg(ds.Name), arg(partition)))
	}
	readEvents(ctx, src.Streams, &r)
	readUpstreams(ctx, src, ds, &r)
	readOutdated(ctx, src, ds, &r)
	if ds.Calendar != nil {
		r.Expected = expect(*ds.Calendar, r.At, partition)
	}
	if rc := ds.Recheck; rc != nil && rc.Window.Holds(partition, r.At) {
		end, _ := rc.Window.Ends(partition)
		r.ProvisionalUntil, r.RecheckEvery = &end, rc.Every
	}
	r.Verdict = decide(&r)
	return r, nil
}

// readDeadLetters reads the partition's dead letters, newest first; when
// NATS cannot be read that becomes a note.
func readDeadLetters(ctx context.Context, s Streams, r *Report) {
	if s == nil {
		r.Notes = append(r.Notes, "NATS was not read: no events or dead letters are shown")
		return
	}
	dead, err := s.DeadLetters(ctx, r.Dataset)
	if err != nil {
		r.Notes = append(r.Notes, "dead letters could not be read: "+err.Error())
	}
	for i := len(dead) - 1; i >= 0; i-- { // newest first
		if dead[i].Partition == r.Partition {
			r.DeadLetters = append(r.DeadLetters, dead[i])
		}
	}
}

// readEvents reads the events the attempts and dead letters name; what
// cannot be read becomes a note.
func readEvents(ctx context.Context, s Streams, r *Report) {
	if s == nil {
		return
	}
	type named struct {
		runID string
		force bool
	}
	seqs := map[uint64]named{}
	for _, a := range r.Attempts {
		if a.StreamSeq != nil && *a.StreamSeq > 0 {
			seqs[uint64(*a.StreamSeq)] = named{a.RunID, a.Force}
		}
	}
	for _, d := range r.DeadLetters {
		if d.OriginalSeq > 0 {
			if _, ok := seqs[d.OriginalSeq]; !ok {
				seqs[d.OriginalSeq] = named{runID: d.RunID}
			}
		}
	}
	order := make([]uint64, 0, len(seqs))
	for q := range seqs {
		order = append(order, q)
	}
	slices.SortFunc(order, func(a, b uint64) int { return cmp.Compare(b, a) })
	if len(order) > maxEvents {
		r.Notes = append(r.Notes, fmt.Sprintf("only the newest %d of %d events are shown", maxEvents, len(order)))
		order = order[:maxEvents]
	}
	failed := 0
	for _, q := range order {
		ev, err := s.Event(ctx, q)
		if err != nil {
			failed++
			ev = Event{Seq: q, Gone: true}
		}
		if ev.RunID == "" {
			ev.RunID, ev.Force = seqs[q].runID, seqs[q].force
		}
		r.Events = append(r.Events, ev)
	}
	if failed > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d event(s) are no longer in the events stream (its limits or a purge)", failed))
	}
}

// readUpstreams reads each upstream's latest attempt at the partition.
func readUpstreams(ctx context.Context, src Sources, ds Dataset, r *Report) {
	triggered := map[string]bool{}
	for _, a := range r.Attempts {
		if up, _, _, ok := a.Upstream(); ok {
			triggered[up] = true
		}
	}
	db := src.Audit
	if db == nil {
		return
	}
	for _, name := range ds.Upstreams {
		u := Upstream{Dataset: name, Triggered: triggered[name]}
		at, err := audit.PartitionAttempts(ctx, db, src.Pipeline, name, r.Partition, 1)
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("upstream %s could not be read: %v", name, err))
		} else if len(at) == 1 {
			u.Status, u.RunID, u.FinishedAt = at[0].Status, at[0].RunID, at[0].FinishedAt
		}
		r.Upstreams = append(r.Upstreams, u)
	}
}

// expect finds the partition in the calendar: when it is due and whether
// it is late at now.
func expect(cal calendar.Expect, now time.Time, partition string) *Expected {
	for _, s := range cal.Ended(now, partition, partition) {
		if s.Key == partition {
			return &Expected{Due: s.Due.UTC(), Late: now.After(s.Due), Ended: true}
		}
	}
	return nil
}

// decide reads the story's newest facts and says what they mean; a
// partition not loaded whose dataset is paused says so instead.
func decide(r *Report) Verdict {
	v := decideAudit(r)
	if p := r.Paused; p != nil && Exit(v.State) == 3 && v.State != StateLoading {
		return verdict(StatePaused, p.String()+"; its events are held, no attempt spent ("+v.State+": "+clip(v.Line, 120)+"); to load now:",
			"idem resume "+arg(r.Dataset))
	}
	return v
}

func decideAudit(r *Report) Verdict {
	var last *audit.StoryAttempt
	if len(r.Attempts) > 0 {
		last = &r.Attempts[0]
	}
	// The latest success, and whether a dead letter came after it.
	var won *audit.StoryAttempt
	for i := range r.Attempts {
		if r.Attempts[i].Status == audit.StatusSuccess {
			won = &r.Attempts[i]
			break
		}
	}
	var dead *deadletter.Letter
	if len(r.DeadLetters) > 0 && (won == nil || won.FinishedAt == nil || r.DeadLetters[0].FailedAt.After(*won.FinishedAt)) {
		dead = &r.DeadLetters[0]
	}
	w := r.Waiting
	switch {
	case w != nil && !w.GaveUp && (dead == nil || dead.FailedAt.Before(w.CheckedAt)):
		return verdict(StateWaiting, fmt.Sprintf("waiting for its source since %s (run %s, no attempt spent): %s; checked %d time(s), last at %s; gives up at %s and dead-letters it%s",
			stamp(w.Since), w.RunID, clip(w.Reason, 160), w.Checks, stamp(w.CheckedAt), stamp(w.GivesUpAt), wasLoaded(won)),
			"idem audit why "+arg(r.Dataset)+" "+arg(r.Partition))
	case last != nil && last.Status == audit.StatusStarted && dead == nil:
		return verdict(StateLoading, fmt.Sprintf("loading since %s: run %s, attempt %d%s", stamp(last.StartedAt), last.RunID, last.Attempt,
			wasLoaded(won)), "idem audit why "+arg(r.Dataset)+" "+arg(r.Partition))
	case dead != nil:
		line := fmt.Sprintf("dead-lettered %s: %s", stamp(dead.FailedAt), deadReason(r, dead))
		if won != nil {
			line += "; " + strings.TrimPrefix(wasLoaded(won), "; ")
		}
		return verdict(StateDeadLettered, line+"; "+fixHint(r, dead)+", then:", fmt.Sprintf("idem dlq replay %d", dead.Seq))
	case last != nil && audit.StateOf(last.Status, last.ErrorKind) == audit.StateRejected && (won == nil || won.ID < last.ID):
		return verdict(StateRejected, fmt.Sprintf("rejected %s by its checks: %s%s; fix the data, then:", stamp(finished(last)),
			checkReason(r, last.ID, last.Error), wasLoaded(won)), "idem publish "+arg(r.Dataset)+" "+arg(r.Partition)+" --force --wait")
	case last != nil && last.Status == audit.StatusFailed && (won == nil || won.ID < last.ID):
		return verdict(StateRetrying, fmt.Sprintf("attempt %d of run %s failed %s (%s): %s; JetStream delivers it again%s", last.Attempt, last.RunID,
			stamp(finished(last)), orWord(last.ErrorKind, "error"), clip(last.Error, 160), wasLoaded(won)), "idem audit why "+arg(r.Dataset)+" "+arg(r.Partition))
	case won != nil && won.Kind == audit.KindRetracted:
		return verdict(StateRetracted, fmt.Sprintf("retracted by %s at %s: %s; %d rows deleted; a later run is skipped unless forced",
			orWord(won.Attributes["by"], "an operator"), stamp(finished(won)), orWord(won.Attributes["reason"], "no reason given"), deref64(won.Deleted)),
			"")
	case last != nil && last.Status == audit.StatusCancelled && won == nil:
		return verdict(StateCancelled, fmt.Sprintf("not loaded: run %s was %s; to load it now:", last.RunID, clip(last.Error, 160)),
			fmt.Sprintf("idem backfill %s --from %s --to %s", arg(r.Dataset), arg(r.Partition), arg(r.Partition)))
	case won != nil && r.Outdated != nil:
		return verdict(StateOutdated, "loaded under an older definition ("+outdatedChanges(r.Outdated)+"); `idem backfill "+arg(r.Dataset)+
			" --reprocess outdated` reloads it; "+loadedLine(r, won), "idem backfill "+arg(r.Dataset)+" --reprocess outdated")
	case won != nil && r.ProvisionalUntil != nil:
		return verdict(StateProvisional, loadedLine(r, won)+madeChanges(r, won.ID)+"; "+provisional(r)+"; "+pending(r), "")
	case won != nil:
		return verdict(StateLoaded, loadedLine(r, won)+madeChanges(r, won.ID)+"; "+pending(r), "")
	default:
		return missing(r)
	}
}

// provisional: "provisional until 2026-12-07 00:00Z: its source is
// rechecked every 1h0m0s (last checked at …, unchanged)".
func provisional(r *Report) string {
	line := fmt.Sprintf("provisional until %s: its source is rechecked every %s and the partition reloaded if it changed", stamp(*r.ProvisionalUntil), r.RecheckEvery)
	if rc := r.Recheck; rc != nil && rc.CheckedAt != nil {
		line += fmt.Sprintf(" (last checked at %s, %d check(s))", stamp(*rc.CheckedAt), rc.Checks)
	}
	return line
}

func verdict(state, line, next string) Verdict {
	return Verdict{State: state, Line: line, Next: next, Exit: Exit(state)}
}

// loadedLine: "loaded by run r-7 at 03:12Z, 10 rows, checks passed".
func loadedLine(r *Report, won *audit.StoryAttempt) string {
	var b strings.Builder
	if won.Kind == audit.KindRestored {
		fmt.Fprintf(&b, "restored by %s at %s to the rows of run %s: %s; ", orWord(won.Attributes["by"], "an operator"), stamp(finished(won)),
			won.Attributes["to_run"], orWord(won.Attributes["reason"], "no reason given"))
	}
	fmt.Fprintf(&b, "loaded by run %s at %s", won.RunID, stamp(finished(won)))
	if won.Rows != nil {
		fmt.Fprintf(&b, ", %d rows", *won.Rows)
	}
	if won.Reverify {
		b.WriteString(", loaded again after a warehouse failover")
	}
	if rc := r.Recheck; rc != nil && rc.Move != nil && rc.Move.RunID == won.RunID {
		fmt.Fprintf(&b, ", reloaded after a recheck found at %s that its source changed (%s)", stamp(rc.Move.At), rc.Move.What())
	}
	b.WriteString(", " + checksOf(r, won.ID))
	return b.String()
}

// checksOf sums up the outcomes of one attempt's checks.
func checksOf(r *Report, id int64) string {
	var n, warn int
	for _, c := range r.Checks {
		if c.AuditID != id {
			continue
		}
		n++
		if c.Status == checks.StatusFail || c.Status == checks.StatusWarn {
			warn++
		}
	}
	switch {
	case n == 0:
		return "no checks"
	case warn == 0:
		return "checks passed"
	default:
		return fmt.Sprintf("%d of %d checks warned", warn, n)
	}
}

// checkReason names the checks that failed attempt id.
func checkReason(r *Report, id int64, errText string) string {
	var out []string
	for _, c := range r.Checks {
		if c.AuditID == id && c.Status == checks.StatusFail {
			out = append(out, fmt.Sprintf("check %s failed (%d of %d rows)", c.Name, c.Failing, c.Checked))
		}
	}
	if len(out) == 0 {
		return clip(errText, 160)
	}
	return strings.Join(out, ", ")
}

// deadReason is the dead letter's error, named by its check where one
// refused it, by the schema changes its on_schema_change refused where
// that did.
func deadReason(r *Report, d *deadletter.Letter) string {
	a := deadAttempt(r, d)
	switch {
	case a == nil:
	case a.ErrorKind == audit.KindCheck:
		return checkReason(r, a.ID, d.Error)
	case len(refused(r, a.ID)) > 0:
		return "schema_mismatch: " + differences(r, a.ID)
	}
	return clip(d.Error, 160)
}

// deadAttempt is the newest failed attempt of the dead letter's run: the
// one that dead-lettered it (its failure is recorded first).
func deadAttempt(r *Report, d *deadletter.Letter) *audit.StoryAttempt {
	for i, a := range r.Attempts {
		if a.RunID == d.RunID && a.Status == audit.StatusFailed {
			return &r.Attempts[i]
		}
	}
	return nil
}

// fixHint says what to fix before the replay, from the dead letter's kind.
func fixHint(r *Report, d *deadletter.Letter) string {
	if a := deadAttempt(r, d); a != nil {
		if rs := refused(r, a.ID); len(rs) > 0 {
			return schemaFix(r, rs)
		}
		switch a.ErrorKind {
		case audit.KindCheck:
			return "fix the source's rows"
		case audit.KindTransient, audit.KindUnavailable, audit.KindInterrupted:
			return "it ran out of retries; once the cause is gone"
		}
	}
	if d.Kind == deadletter.KindExhausted {
		return "it ran out of retries; once the cause is gone"
	}
	return "fix the event, the source or the target"
}

// maxNamed bounds the schema changes a verdict names, to keep it one line.
const maxNamed = 3

// changesOf are the schema changes attempt id met, in the order recorded.
func changesOf(r *Report, id int64, keep func(audit.SchemaChangeRow) bool) []audit.SchemaChangeRow {
	var out []audit.SchemaChangeRow
	for i := len(r.SchemaChanges) - 1; i >= 0; i-- { // newest first: the attempt's in order
		if c := r.SchemaChanges[i]; c.AuditID == id && keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// refused are the changes attempt id's on_schema_change refused.
func refused(r *Report, id int64) []audit.SchemaChangeRow {
	return changesOf(r, id, func(c audit.SchemaChangeRow) bool { return c.Action == strategies.ActionRefused })
}

// madeChanges names the columns a successful load added or widened:
// "; added column note text (append_new_columns)".
func madeChanges(r *Report, id int64) string {
	made := changesOf(r, id, func(c audit.SchemaChangeRow) bool { return c.Made() })
	if len(made) == 0 {
		return ""
	}
	return "; " + named(r, says(made, func(c audit.SchemaChangeRow) string {
		if c.Action == strategies.ActionWidened {
			return fmt.Sprintf("widened column %s from %s to %s", c.Column, c.OldType, c.NewType)
		}
		return fmt.Sprintf("added column %s %s", c.Column, c.NewType)
	})) + " (" + made[0].Policy + ")"
}

// differences names every difference attempt id met, with the policy that
// refused it: "new column note text (on_schema_change: fail)".
func differences(r *Report, id int64) string {
	all := changesOf(r, id, func(audit.SchemaChangeRow) bool { return true })
	return named(r, says(all, func(c audit.SchemaChangeRow) string { return c.Difference() })) + " (on_schema_change: " + all[0].Policy + ")"
}

// schemaFix is what fixes refused changes: why each was refused, where
// the policy is not simply fail, and the DDL idem would have run; under
// fail, also the policy that would add the columns.
func schemaFix(r *Report, rs []audit.SchemaChangeRow) string {
	var why, ddl []string
	fail := false
	for _, c := range rs {
		if c.DDL != "" {
			ddl = append(ddl, c.DDL)
			fail = fail || c.Policy == strategies.OnSchemaChangeFail
		}
		switch {
		case c.Reason == "" || c.DDL != "" && c.Policy == strategies.OnSchemaChangeFail:
			// The fail policy's own refusal: the fix below says it.
		case c.DDL == "":
			why = append(why, c.Column+": "+clip(c.Reason, 160))
		case !slices.Contains(why, clip(c.Reason, 160)): // one reason for all, such as a role that may not alter
			why = append(why, clip(c.Reason, 160))
		}
	}
	out := []string{}
	if len(why) > 0 {
		out = append(out, named(r, why))
	}
	if len(ddl) > 0 {
		fix := "fix the target with " + named(r, ddl)
		if fail {
			fix += " or set on_schema_change: " + strategies.OnSchemaChangeAppend + " on " + r.Dataset
		}
		out = append(out, fix)
	}
	return strings.Join(out, "; ")
}

// named joins at most maxNamed of what a verdict names; the rest are
// counted, with the command that lists them.
func named(r *Report, say []string) string {
	if len(say) > maxNamed {
		say = append(say[:maxNamed:maxNamed], fmt.Sprintf("%d more (idem audit schema %s --partition %s)", len(say)-maxNamed, arg(r.Dataset), arg(r.Partition)))
	}
	return strings.Join(say, ", ")
}

// says is what say writes of each change.
func says(cs []audit.SchemaChangeRow, say func(audit.SchemaChangeRow) string) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = say(c)
	}
	return out
}

// pending says what is still to happen after a load: downstream events
// not yet published.
func pending(r *Report) string {
	var p []string
	for _, d := range r.Downstream {
		if d.SentAt == nil {
			p = append(p, "event for "+d.Dataset+" not yet published")
		}
	}
	if len(p) == 0 {
		return "nothing pending"
	}
	return strings.Join(p, ", ")
}

// missing is the verdict of a partition no attempt names.
func missing(r *Report) Verdict {
	next := fmt.Sprintf("idem backfill %s --from %s --to %s", arg(r.Dataset), arg(r.Partition), arg(r.Partition))
	var line string
	switch {
	case r.Expected != nil && r.Expected.Late:
		line = fmt.Sprintf("expected by %s, no event yet", stamp(r.Expected.Due))
	case r.Expected != nil:
		line = fmt.Sprintf("due by %s, no event yet", stamp(r.Expected.Due))
	default:
		line = "no event has named this partition"
	}
	for _, u := range r.Upstreams {
		switch {
		case u.Status == "":
			line += fmt.Sprintf(": upstream %s has not loaded it either", u.Dataset)
		case u.Status == audit.StatusSuccess || u.Status == audit.StatusSkipped:
			line += fmt.Sprintf(": upstream %s last loaded it %s", u.Dataset, stamp(deref(u.FinishedAt)))
		default:
			line += fmt.Sprintf(": upstream %s is %s", u.Dataset, u.Status)
		}
	}
	return verdict(StateMissing, line+"; to load it now:", next)
}

func wasLoaded(won *audit.StoryAttempt) string {
	if won == nil {
		return ""
	}
	return fmt.Sprintf("; run %s's rows of %s stay", won.RunID, stamp(finished(won)))
}

func finished(a *audit.StoryAttempt) time.Time {
	if a.FinishedAt != nil {
		return *a.FinishedAt
	}
	return a.StartedAt
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// stamp is a time as the verdict writes it: UTC, to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "at an unknown time"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func orWord(s, w string) string {
	if s == "" {
		return w
	}
	return s
}

// clip keeps the verdict one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// arg quotes a command's argument for a POSIX shell when it needs it, so
// the next command can be pasted whatever the partition holds.
func arg(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:/=+@,", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func deref64(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}
