package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/schemas"
)

// dlqKinds are the words --kind accepts.
var dlqKinds = func() []string {
	var ks []string
	for _, k := range deadletter.Kinds() {
		ks = append(ks, string(k))
	}
	return ks
}()

// dlqFilter is the flags that select dead letters; every command that reads
// more than one takes the same.
type dlqFilter struct {
	dataset, kind, reason, since string
}

func (f *dlqFilter) flags(c *cobra.Command) {
	c.Flags().StringVar(&f.dataset, "dataset", "", "only this dataset's dead letters (_invalid: events whose dataset could not be read)")
	c.Flags().StringVar(&f.kind, "kind", "", "only this kind: "+strings.Join(dlqKinds, ", "))
	c.Flags().StringVar(&f.reason, "reason", "", "only fatal dead letters of this reason, the word their error starts with: schema_mismatch, check_failed, empty_source, ...")
	c.Flags().StringVar(&f.since, "since", "", `only those failed since: a duration ("2h", "30m") or a time (RFC 3339, or YYYY-MM-DD in UTC)`)
}

func (f dlqFilter) parse(now time.Time) (deadletter.Filter, error) {
	out := deadletter.Filter{Dataset: f.dataset, Kind: deadletter.Kind(f.kind), Reason: f.reason}
	if f.dataset != "" && strings.ContainsAny(f.dataset, ".*> \t") {
		return out, &UsageError{fmt.Errorf("--dataset %q: want one dataset name, no wildcards", f.dataset)}
	}
	if f.kind != "" && !slices.Contains(dlqKinds, f.kind) {
		return out, &UsageError{fmt.Errorf("--kind %q: want one of %s", f.kind, strings.Join(dlqKinds, ", "))}
	}
	if f.reason != "" && !deadletter.IsReason(f.reason) {
		return out, &UsageError{fmt.Errorf("--reason %q: want one reason word in lower case, such as schema_mismatch or check_failed (the word a fatal error starts with, see 'idem dlq ls')", f.reason)}
	}
	if f.since == "" {
		return out, nil
	}
	if d, err := time.ParseDuration(f.since); err == nil {
		if d < 0 {
			return out, &UsageError{fmt.Errorf("--since %s: want a positive duration", f.since)}
		}
		out.Since = now.Add(-d)
		return out, nil
	}
	for _, layout := range []string{time.RFC3339, time.DateOnly} {
		if t, err := time.Parse(layout, f.since); err == nil {
			out.Since = t
			return out, nil
		}
	}
	return out, &UsageError{fmt.Errorf(`--since %q: want a duration ("2h") or a time (2026-11-28T03:00:00Z, 2026-11-28)`, f.since)}
}

func (f dlqFilter) any() bool {
	return f.dataset != "" || f.kind != "" || f.reason != "" || f.since != ""
}

// dlqStore is the dead-letter stream and the connection it was opened on.
type dlqStore struct {
	*deadletter.Store
	cfg *config.Config
	nc  *nats.Conn
}

func (e *env) openDLQ(ctx context.Context, name string) (*dlqStore, error) {
	cfg, err := e.validConfig()
	if err != nil {
		return nil, err
	}
	nc, js, err := e.openNATS(ctx, cfg, name)
	if err != nil {
		return nil, err
	}
	s, err := deadletter.Open(ctx, js, deadletter.Config{
		Stream: cfg.NATS.DLQStream, SubjectPrefix: cfg.NATS.DLQSubjectPrefix, EventsStream: cfg.NATS.Stream})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &dlqStore{Store: s, cfg: cfg, nc: nc}, nil
}

func (q *dlqStore) close() { q.nc.Close() }

func parseDLQSeq(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, &UsageError{fmt.Errorf("SEQ %q: want the dead letter's stream sequence, a positive number (see 'idem dlq ls')", s)}
	}
	return n, nil
}

func dlqCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, replay and purge dead letters",
		Long: `Dead letters are events the consumer gave up on, kept in the dead-letter
stream (nats.dlq_stream, default IDEM_DLQ) with the original body and headers
and Idem-* headers saying why: kind fatal (retrying cannot help), exhausted
(every retry failed) or crashed (the process died on the last delivery).

  idem dlq ls                  what failed, and why
  idem dlq show SEQ            one dead letter in full
  idem dlq replay SEQ | --all  republish to the original subject once fixed
  idem dlq replay --reason R DATASET
                               replay a dataset's dead letters of one reason
  idem dlq purge --yes         delete dead letters no one will replay

Reading never changes the stream.`,
	}
	c.AddCommand(dlqLsCmd(e), dlqShowCmd(e), dlqReplayCmd(e), dlqPurgeCmd(e))
	return c
}

func dlqLsCmd(e *env) *cobra.Command {
	var f dlqFilter
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls [--dataset D] [--kind K] [--reason R] [--since T]",
		Short: "One line per dead letter: when, what, why",
		Long: `List dead letters, oldest first: stream sequence (SEQ, for show, replay and
purge), when the event failed, its dataset, partition and run_id, the kind of
failure, how many deliveries it had, how many times it was already replayed,
and the error; a fatal error starts with its reason (--reason selects by it;
--json has it as "reason"). An empty dead-letter stream is not a failure
(exit 0).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sel, err := f.parse(time.Now())
			if err != nil {
				return err
			}
			q, err := e.openDLQ(cmd.Context(), "idem dlq ls")
			if err != nil {
				return err
			}
			defer q.close()
			dls, err := q.List(cmd.Context(), sel, false)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.out, dls)
			}
			if len(dls) > 0 {
				if err := deadLetterTable(dls).print(e.out, isTerminal(e.out)); err != nil {
					return err
				}
			}
			fmt.Fprintf(e.out, "%d dead letter(s)\n", len(dls))
			return nil
		},
	}
	f.flags(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func deadLetterTable(dls []deadletter.Letter) *table {
	t := &table{headers: []string{"SEQ", "FAILED_AT", "DATASET", "PARTITION", "RUN_ID", "KIND", "DELIVERIES", "REPLAYS", "ERROR"}}
	for _, dl := range dls {
		t.add(fmt.Sprint(dl.Seq), dl.FailedAt.Format(time.RFC3339), orDash(terminalSafe(dl.Dataset)), orDash(terminalSafe(dl.Partition)),
			truncateCell(terminalSafe(dl.RunID), 40), orDash(string(dl.Kind)), fmt.Sprint(dl.Deliveries), fmt.Sprint(dl.Replays), truncateCell(terminalSafe(dl.Error), 80))
	}
	return t
}

// deadLetterDetail is what show prints: the summary, every header, and the
// body (body_json too when the body is JSON).
type deadLetterDetail struct {
	deadletter.Letter
	Stream   string              `json:"stream"`
	Headers  map[string][]string `json:"headers"`
	Body     string              `json:"body"`
	BodyJSON json.RawMessage     `json:"body_json"`
}

func dlqShowCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show SEQ",
		Short: "One dead letter in full: headers, error, attempts, body",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := parseDLQSeq(args[0])
			if err != nil {
				return err
			}
			q, err := e.openDLQ(cmd.Context(), "idem dlq show")
			if err != nil {
				return err
			}
			defer q.close()
			dl, err := q.Get(cmd.Context(), seq)
			if err != nil {
				return err
			}
			d := deadLetterDetail{Letter: dl, Stream: q.cfg.NATS.DLQStream, Headers: dl.Header, Body: string(dl.Body)}
			if json.Valid(dl.Body) {
				d.BodyJSON = dl.Body
			}
			if asJSON {
				return printJSON(e.out, d)
			}
			return printDeadLetter(e.out, d)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printDeadLetter(w io.Writer, d deadLetterDetail) error {
	fmt.Fprintf(w, "dead letter %d of stream %s\n", d.Seq, d.Stream)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, orDash(terminalSafe(v))) }
	field("subject", d.Subject)
	field("stored_at", d.StoredAt.Format(time.RFC3339Nano))
	field("failed_at", d.FailedAt.Format(time.RFC3339Nano))
	field("kind", string(d.Kind))
	field("reason", d.Reason)
	field("error", d.Error)
	field("deliveries", fmt.Sprint(d.Deliveries))
	field("replays", fmt.Sprint(d.Replays))
	field("dataset", d.Dataset)
	field("partition", d.Partition)
	field("run_id", d.RunID)
	field("original", fmt.Sprintf("%s (stream %s seq %d)", d.OriginalSubject, orDash(d.OriginalStream), d.OriginalSeq))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "headers")
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range d.Headers[k] {
			fmt.Fprintf(w, "  %s: %s\n", terminalSafe(k), terminalSafe(v))
		}
	}
	var pretty bytes.Buffer
	switch {
	case d.BodyOmitted != "":
		fmt.Fprintf(w, "body omitted: %s\n", terminalSafe(d.BodyOmitted))
	case d.Body == "":
		fmt.Fprintln(w, "body: empty")
	case d.BodyJSON != nil && json.Indent(&pretty, d.BodyJSON, "", "  ") == nil:
		fmt.Fprintf(w, "body (JSON, %d bytes)\n%s\n", len(d.Body), terminalSafe(pretty.String()))
	case utf8.ValidString(d.Body):
		fmt.Fprintf(w, "body (not JSON, %d bytes)\n%s\n", len(d.Body), terminalSafe(d.Body))
	default:
		fmt.Fprintf(w, "body (not UTF-8, %d bytes)\n%q\n", len(d.Body), d.Body)
	}
	return nil
}

// terminalSafe keeps a terminal safe from what a publisher put in a header or
// body: control characters other than newline and tab are shown escaped.
func terminalSafe(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

type replayReport struct {
	DryRun   bool                      `json:"dry_run"`
	Matched  int                       `json:"matched"`
	Replayed int                       `json:"replayed"`
	Skipped  int                       `json:"skipped"`
	Failed   int                       `json:"failed"`
	Messages []deadletter.ReplayResult `json:"messages"`
}

func dlqReplayCmd(e *env) *cobra.Command {
	var f dlqFilter
	var all, dryRun, force, asJSON bool
	c := &cobra.Command{
		Use:   "replay SEQ | --all [--dataset D] [--kind K] [--reason R] [--since T] | --reason R DATASET",
		Short: "Republish dead letters to their original subject, then remove them",
		Long: fmt.Sprintf(`Republish a dead letter (SEQ) or every one the filters select (--all) to its
original subject through JetStream, with its original body and headers and
Idem-Replay-Of: <SEQ>, Idem-Replay-Count: <n+1>. The dead letter is deleted
only after JetStream has stored the replay: a dead letter is never lost, and
a failure between the two leaves it in place, to be replayed again or purged
(a second replay is harmless: loads are idempotent).

  idem dlq replay --reason schema_mismatch orders

replays the dead letters of dataset orders whose fatal error has that reason
(the word it starts with: schema_mismatch, check_failed, empty_source, ...),
once the target or the policy is fixed; it is --all --dataset orders --reason
schema_mismatch. The others, of that dataset or another, stay.

Dead letters are replayed one by one in stream order, oldest first: two of
one partition reach the events stream in the order they failed.

Fix the cause first (read 'idem dlq show SEQ'): a replay that fails again
comes back as a new dead letter with its replay count. One already replayed
%d times or more is skipped unless --force.

Headers: the original's Nats-Msg-Id is not sent again (JetStream would drop
the replay as a duplicate inside its window), nor other JetStream directives
(Nats-Expected-*, Nats-Rollup, ...) except Nats-TTL; the Idem-* dead-letter
headers are dropped. A dead letter stored without its body is skipped.

A replayed event keeps its run_id: if that run already succeeded, the
consumer records it skipped and loads nothing. That is on purpose; to load a
partition again, publish a new event: 'idem publish DATASET PARTITION --force'.

Exit code 1 when any dead letter was not replayed (failed or skipped).`, deadletter.MaxReplays),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sf, seq, byDataset, err := replayTarget(f, all, args)
			if err != nil {
				return err
			}
			sel, err := sf.parse(time.Now())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			q, err := e.openDLQ(ctx, "idem dlq replay")
			if err != nil {
				return err
			}
			defer q.close()
			var dls []deadletter.Letter
			if seq == 0 {
				if dls, err = q.List(ctx, sel, true); err != nil {
					return err
				}
			} else {
				dl, err := q.Get(ctx, seq)
				if err != nil {
					return err
				}
				dls = []deadletter.Letter{dl}
			}
			// In List's order, one at a time: a partition's older dead
			// letter is stored again before its newer one.
			rep := replayReport{DryRun: dryRun, Matched: len(dls), Messages: []deadletter.ReplayResult{}}
			for _, dl := range dls {
				r := q.Replay(ctx, dl, deadletter.ReplayOptions{DryRun: dryRun, Force: force})
				switch r.Action {
				case deadletter.ActionReplayed:
					rep.Replayed++
				case deadletter.ActionSkipped:
					rep.Skipped++
				case deadletter.ActionFailed:
					rep.Failed++
				}
				rep.Messages = append(rep.Messages, r)
				if !asJSON {
					printReplayed(e.out, r)
				}
			}
			what := "dead letter(s)"
			if byDataset {
				what = fmt.Sprintf("dead letter(s) of %s with reason %s", terminalSafe(sf.dataset), sf.reason)
			}
			if asJSON {
				if err := printJSON(e.out, rep); err != nil {
					return err
				}
			} else if dryRun {
				fmt.Fprintf(e.out, "dry run: would replay %d, skip %d of %d %s; nothing was published or deleted\n",
					len(dls)-rep.Skipped, rep.Skipped, len(dls), what)
			} else {
				fmt.Fprintf(e.out, "replayed %d, skipped %d, failed %d of %d %s\n", rep.Replayed, rep.Skipped, rep.Failed, len(dls), what)
			}
			if !dryRun && rep.Skipped+rep.Failed > 0 {
				return ErrReported
			}
			return nil
		},
	}
	f.flags(c)
	c.Flags().BoolVar(&all, "all", false, "replay every dead letter the filters select")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be replayed; publish and delete nothing")
	c.Flags().BoolVar(&force, "force", false, fmt.Sprintf("replay even dead letters already replayed %d times or more", deadletter.MaxReplays))
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// replayTarget reads replay's three forms: SEQ (seq > 0); --all with
// filters; --reason R DATASET (byDataset), which is --all --dataset DATASET
// --reason R. The filter returned selects for the last two.
func replayTarget(f dlqFilter, all bool, args []string) (sel dlqFilter, seq uint64, byDataset bool, err error) {
	usage := func(format string, a ...any) (dlqFilter, uint64, bool, error) {
		return f, 0, false, &UsageError{fmt.Errorf(format, a...)}
	}
	arg := ""
	if len(args) == 1 {
		arg = args[0]
	}
	_, numErr := strconv.ParseUint(arg, 10, 64)
	isSeq := arg != "" && numErr == nil
	isDataset := schemas.ValidDataset(arg) || arg == deadletter.InvalidSubjectToken
	switch {
	case f.reason != "" && isSeq:
		return usage("--reason selects a dataset's dead letters: give DATASET, not SEQ %s (idem dlq replay --reason %s DATASET); to replay dead letter %s alone, leave --reason out", arg, f.reason, arg)
	case f.reason != "" && arg != "" && all:
		return usage("give DATASET or --all, not both: --reason %s %s already replays every one of %s", f.reason, arg, arg)
	case f.reason != "" && arg != "" && f.dataset != "":
		return usage("the dataset is given twice (DATASET %q and --dataset %q): give DATASET alone", arg, f.dataset)
	case f.reason != "" && arg != "" && !isDataset:
		return usage("DATASET %q: want one dataset name, as 'idem dlq ls' shows it (or _invalid)", arg)
	case f.reason != "" && arg != "":
		f.dataset = arg
		return f, 0, true, nil
	case arg != "" && all:
		return usage("give SEQ or --all, not both")
	case arg == "" && !all && f.reason != "":
		return usage("--reason %s replays one dataset's dead letters: name it (idem dlq replay --reason %s DATASET), or add --all for every dataset's", f.reason, f.reason)
	case arg == "" && !all:
		return usage("give the SEQ of a dead letter, --all, or --reason R DATASET (see 'idem dlq ls')")
	case arg != "" && !isSeq && isDataset:
		return usage("%q is a dataset, not a SEQ: to replay its dead letters of one reason, name the reason (idem dlq replay --reason schema_mismatch %s; 'idem dlq ls --dataset %s' shows the errors), or replay all of them with --all --dataset %s", arg, arg, arg, arg)
	case arg != "" && f.any():
		return usage("--dataset, --kind and --since select dead letters for --all; with SEQ, leave them out")
	case arg != "":
		n, err := parseDLQSeq(arg)
		return f, n, false, err
	}
	return f, 0, false, nil
}

func printReplayed(w io.Writer, r deadletter.ReplayResult) {
	what := fmt.Sprintf("%d %s %s run_id=%s", r.Seq, orDash(terminalSafe(r.Dataset)), orDash(terminalSafe(r.Partition)), orDash(terminalSafe(r.RunID)))
	switch r.Action {
	case deadletter.ActionReplayed:
		fmt.Fprintf(w, "replayed %s to %s: stream %s seq %d (replay %d)\n", what, r.Subject, r.Stream, r.StreamSeq, r.ReplayCount)
	case deadletter.ActionWouldReplay:
		fmt.Fprintf(w, "would replay %s to %s (replay %d)\n", what, r.Subject, r.ReplayCount)
	default:
		fmt.Fprintf(w, "%s %s: %s\n", r.Action, what, terminalSafe(r.Reason))
	}
}

type purgeReport struct {
	DryRun  bool                `json:"dry_run"`
	Deleted int                 `json:"deleted"`
	Failed  int                 `json:"failed"`
	Matched []deadletter.Letter `json:"matched"`
}

func dlqPurgeCmd(e *env) *cobra.Command {
	var f dlqFilter
	var yes, dryRun, asJSON bool
	c := &cobra.Command{
		Use:   "purge [--dataset D] [--kind K] [--reason R] [--since T] --yes",
		Short: "Delete dead letters (all, or those the filters select)",
		Long: `Delete the dead letters the filters select (every one without filters), one
by one, so a dead letter stored after the command started is never deleted.
Without --yes nothing is deleted: the command says how many would be and
exits 2; --dry-run lists them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sel, err := f.parse(time.Now())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			q, err := e.openDLQ(ctx, "idem dlq purge")
			if err != nil {
				return err
			}
			defer q.close()
			dls, err := q.List(ctx, sel, false)
			if err != nil {
				return err
			}
			if !yes && !dryRun {
				return &UsageError{fmt.Errorf("purge would delete %d dead letter(s) of %s; add --yes to delete them, or --dry-run to list them", len(dls), q.cfg.NATS.DLQStream)}
			}
			rep := purgeReport{DryRun: dryRun, Matched: dls}
			for _, dl := range dls {
				what := fmt.Sprintf("%d %s %s run_id=%s %s", dl.Seq, orDash(terminalSafe(dl.Dataset)), orDash(terminalSafe(dl.Partition)), orDash(terminalSafe(dl.RunID)), orDash(string(dl.Kind)))
				if dryRun {
					if !asJSON {
						fmt.Fprintf(e.out, "would delete %s\n", what)
					}
					continue
				}
				if err := q.Delete(ctx, dl.Seq); err != nil {
					rep.Failed++
					if !asJSON {
						fmt.Fprintf(e.out, "failed %s: %v\n", what, err)
					}
					continue
				}
				rep.Deleted++
				if !asJSON {
					fmt.Fprintf(e.out, "deleted %s\n", what)
				}
			}
			switch {
			case asJSON:
				if err := printJSON(e.out, rep); err != nil {
					return err
				}
			case dryRun:
				fmt.Fprintf(e.out, "dry run: would delete %d dead letter(s); nothing was deleted\n", len(dls))
			default:
				fmt.Fprintf(e.out, "deleted %d of %d dead letter(s)\n", rep.Deleted, len(dls))
			}
			if rep.Failed > 0 {
				return ErrReported
			}
			return nil
		},
	}
	f.flags(c)
	c.Flags().BoolVar(&yes, "yes", false, "really delete")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be deleted; delete nothing")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
