package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
)

const (
	// headerReplayOf and headerReplayCount mark a replayed event. When the
	// replay fails again, the consumer keeps them in the new dead letter
	// renamed Idem-Original-*, which is how the count survives the round trip.
	headerReplayOf    = "Idem-Replay-Of"
	headerReplayCount = "Idem-Replay-Count"
	// maxReplays: a dead letter already replayed this often fails for a
	// reason replaying does not fix, so another replay needs --force.
	maxReplays = 3
)

var dlqKinds = []string{string(consumer.KindFatal), string(consumer.KindExhausted), string(consumer.KindCrashed)}

// directGetHeaders describe a direct-get response, not the stored message:
// a stream with allow_direct returns them beside the message's own headers.
var directGetHeaders = []string{jetstream.StreamHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer,
	jetstream.SubjectHeader, "Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence"}

// restorableNats are the original's Nats-* headers a replay may send again.
// The others are JetStream directives for a first publish: Nats-Msg-Id
// would make JetStream drop the replay as a duplicate inside its window,
// Nats-Expected-* would fail against a stream that has moved on, a
// Nats-Rollup would purge the subject. Nats-TTL means the same the second time.
var restorableNats = []string{"Nats-TTL"}

// deadLetterEntry is one message of the dead-letter stream as the dlq commands
// show it; the JSON names are a stable interface for scripts.
type deadLetterEntry struct {
	Seq             uint64    `json:"seq"`
	Subject         string    `json:"subject"`
	StoredAt        time.Time `json:"stored_at"`
	FailedAt        time.Time `json:"failed_at"`
	Kind            string    `json:"kind"`
	Dataset         string    `json:"dataset"`
	Partition       string    `json:"partition"`
	RunID           string    `json:"run_id"`
	Deliveries      uint64    `json:"deliveries"`
	Replays         int       `json:"replays"`
	Error           string    `json:"error"`
	OriginalSubject string    `json:"original_subject"`
	OriginalStream  string    `json:"original_stream"`
	OriginalSeq     uint64    `json:"original_seq"`
	BodyOmitted     string    `json:"body_omitted"`

	header nats.Header
	body   []byte
}

func readDeadLetter(m *jetstream.RawStreamMsg) deadLetterEntry {
	h := nats.Header{}
	for k, vs := range m.Header {
		if !slices.ContainsFunc(directGetHeaders, func(d string) bool { return strings.EqualFold(d, k) }) {
			h[k] = vs
		}
	}
	dl := deadLetterEntry{
		Seq: m.Sequence, Subject: m.Subject, StoredAt: m.Time.UTC(), FailedAt: m.Time.UTC(),
		Kind:            h.Get(consumer.HeaderErrorKind),
		Dataset:         h.Get(consumer.HeaderDataset),
		Partition:       h.Get(consumer.HeaderPartition),
		RunID:           h.Get(consumer.HeaderRunID),
		Error:           h.Get(consumer.HeaderError),
		OriginalSubject: h.Get(consumer.HeaderOriginalSubject),
		OriginalStream:  h.Get(consumer.HeaderOriginalStream),
		BodyOmitted:     h.Get(consumer.HeaderBodyOmitted),
		Replays:         replayCount(h),
		header:          h,
		body:            m.Data,
	}
	if t, err := time.Parse(time.RFC3339, h.Get(consumer.HeaderFailedAt)); err == nil {
		dl.FailedAt = t.UTC()
	}
	dl.Deliveries, _ = strconv.ParseUint(h.Get(consumer.HeaderDeliveries), 10, 64)
	dl.OriginalSeq, _ = strconv.ParseUint(h.Get(consumer.HeaderOriginalSeq), 10, 64)
	if dl.Dataset == "" {
		// The subject's token is what --dataset filters on, _invalid included.
		dl.Dataset = m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	}
	return dl
}

// replayCount reads the count a replay set. It comes back from the consumer
// renamed Idem-Original-Idem-Replay-Count; the plain name is read too, for
// dead letters written by hand.
func replayCount(h nats.Header) int {
	for _, k := range []string{consumer.HeaderOriginalPrefix + headerReplayCount, headerReplayCount} {
		if n, err := strconv.Atoi(h.Get(k)); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

// dlqFilter selects dead letters; every command that reads more than one
// takes the same flags.
type dlqFilter struct {
	dataset, kind, since string
	sinceT               time.Time
}

func (f *dlqFilter) flags(c *cobra.Command) {
	c.Flags().StringVar(&f.dataset, "dataset", "", "only this dataset's dead letters (_invalid: events whose dataset could not be read)")
	c.Flags().StringVar(&f.kind, "kind", "", "only this kind: "+strings.Join(dlqKinds, ", "))
	c.Flags().StringVar(&f.since, "since", "", `only those failed since: a duration ("2h", "30m") or a time (RFC 3339, or YYYY-MM-DD in UTC)`)
}

func (f *dlqFilter) parse(now time.Time) error {
	if f.dataset != "" && strings.ContainsAny(f.dataset, ".*> \t") {
		return &UsageError{fmt.Errorf("--dataset %q: want one dataset name, no wildcards", f.dataset)}
	}
	if f.kind != "" && !slices.Contains(dlqKinds, f.kind) {
		return &UsageError{fmt.Errorf("--kind %q: want one of %s", f.kind, strings.Join(dlqKinds, ", "))}
	}
	if f.since == "" {
		return nil
	}
	if d, err := time.ParseDuration(f.since); err == nil {
		if d < 0 {
			return &UsageError{fmt.Errorf("--since %s: want a positive duration", f.since)}
		}
		f.sinceT = now.Add(-d)
		return nil
	}
	for _, layout := range []string{time.RFC3339, time.DateOnly} {
		if t, err := time.Parse(layout, f.since); err == nil {
			f.sinceT = t
			return nil
		}
	}
	return &UsageError{fmt.Errorf(`--since %q: want a duration ("2h") or a time (2026-11-28T03:00:00Z, 2026-11-28)`, f.since)}
}

// subject narrows the read on the server, so --dataset does not read the
// other datasets' dead letters.
func (f dlqFilter) subject(prefix string) string {
	if f.dataset == "" {
		return prefix + ".>"
	}
	return prefix + "." + f.dataset
}

func (f dlqFilter) match(dl deadLetterEntry) bool {
	return (f.kind == "" || dl.Kind == f.kind) && !dl.FailedAt.Before(f.sinceT)
}

func (f dlqFilter) any() bool { return f.dataset != "" || f.kind != "" || f.since != "" }

// dlqStream reads and edits the dead-letter stream. It never creates a
// consumer on it: reads are stream gets, so listing changes nothing.
type dlqStream struct {
	cfg    *config.Config
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
}

func (e *env) openDLQ(ctx context.Context, name string) (*dlqStream, error) {
	cfg, err := e.validConfig()
	if err != nil {
		return nil, err
	}
	nc, js, err := e.openNATS(ctx, cfg, name)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, cfg.NATS.DLQStream)
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("dead-letter stream %s not found: run 'idem streams' (or start 'idem serve'), or check nats.dlq_stream", cfg.NATS.DLQStream)
		}
		return nil, fmt.Errorf("dead-letter stream %s: %w", cfg.NATS.DLQStream, err)
	}
	return &dlqStream{cfg: cfg, nc: nc, js: js, stream: s}, nil
}

func (q *dlqStream) close() { q.nc.Close() }

// scan returns the dead letters f selects, oldest first, up to the last one
// stored when the scan began: a dead letter written meanwhile (a replay
// failing again) is left for the next command. One get per dead letter.
func (q *dlqStream) scan(ctx context.Context, f dlqFilter, keepBody bool) ([]deadLetterEntry, error) {
	info, err := q.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream %s: %w", q.cfg.NATS.DLQStream, err)
	}
	subject := f.subject(q.cfg.NATS.DLQSubjectPrefix)
	out := []deadLetterEntry{}
	for seq := max(info.State.FirstSeq, 1); seq <= info.State.LastSeq; {
		m, err := q.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read dead letters of %s from seq %d: %w", q.cfg.NATS.DLQStream, seq, err)
		}
		if m.Sequence > info.State.LastSeq {
			break
		}
		dl := readDeadLetter(m)
		if !keepBody {
			dl.body = nil
		}
		if f.match(dl) {
			out = append(out, dl)
		}
		seq = m.Sequence + 1
	}
	return out, nil
}

func (q *dlqStream) get(ctx context.Context, seq uint64) (deadLetterEntry, error) {
	m, err := q.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return deadLetterEntry{}, fmt.Errorf("no dead letter %d in stream %s (already replayed or purged?): see 'idem dlq ls'", seq, q.cfg.NATS.DLQStream)
	}
	if err != nil {
		return deadLetterEntry{}, fmt.Errorf("read dead letter %d of %s: %w", seq, q.cfg.NATS.DLQStream, err)
	}
	return readDeadLetter(m), nil
}

func (q *dlqStream) delete(ctx context.Context, seq uint64) error {
	err := q.stream.DeleteMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // someone else removed it: it is gone either way
	}
	return err
}

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
		Use:   "ls [--dataset D] [--kind K] [--since T]",
		Short: "One line per dead letter: when, what, why",
		Long: `List dead letters, oldest first: stream sequence (SEQ, for show, replay and
purge), when the event failed, its dataset, partition and run_id, the kind of
failure, how many deliveries it had, how many times it was already replayed,
and the error. An empty dead-letter stream is not a failure (exit 0).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.parse(time.Now()); err != nil {
				return err
			}
			q, err := e.openDLQ(cmd.Context(), "idem dlq ls")
			if err != nil {
				return err
			}
			defer q.close()
			dls, err := q.scan(cmd.Context(), f, false)
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

func deadLetterTable(dls []deadLetterEntry) *table {
	t := &table{headers: []string{"SEQ", "FAILED_AT", "DATASET", "PARTITION", "RUN_ID", "KIND", "DELIVERIES", "REPLAYS", "ERROR"}}
	for _, dl := range dls {
		t.add(fmt.Sprint(dl.Seq), dl.FailedAt.Format(time.RFC3339), orDash(terminalSafe(dl.Dataset)), orDash(terminalSafe(dl.Partition)),
			truncateCell(terminalSafe(dl.RunID), 40), orDash(dl.Kind), fmt.Sprint(dl.Deliveries), fmt.Sprint(dl.Replays), truncateCell(terminalSafe(dl.Error), 80))
	}
	return t
}

// deadLetterDetail is what show prints: the summary, every header, and the
// body (body_json too when the body is JSON).
type deadLetterDetail struct {
	deadLetterEntry
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
			dl, err := q.get(cmd.Context(), seq)
			if err != nil {
				return err
			}
			d := deadLetterDetail{deadLetterEntry: dl, Stream: q.cfg.NATS.DLQStream, Headers: dl.header, Body: string(dl.body)}
			if json.Valid(dl.body) {
				d.BodyJSON = dl.body
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
	field("kind", d.Kind)
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

// replayed is the fate of one dead letter in a replay.
type replayed struct {
	Seq       uint64 `json:"seq"`
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	RunID     string `json:"run_id"`
	Kind      string `json:"kind"`
	// Action: replayed, would_replay (--dry-run), skipped, failed.
	Action      string `json:"action"`
	Reason      string `json:"reason"`
	Subject     string `json:"subject"`
	ReplayCount int    `json:"replay_count"` // the Idem-Replay-Count sent
	// Stream and StreamSeq: where the replay was stored.
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
}

type replayReport struct {
	DryRun   bool       `json:"dry_run"`
	Matched  int        `json:"matched"`
	Replayed int        `json:"replayed"`
	Skipped  int        `json:"skipped"`
	Failed   int        `json:"failed"`
	Messages []replayed `json:"messages"`
}

func dlqReplayCmd(e *env) *cobra.Command {
	var f dlqFilter
	var all, dryRun, force, asJSON bool
	c := &cobra.Command{
		Use:   "replay SEQ | --all [--dataset D] [--kind K] [--since T]",
		Short: "Republish dead letters to their original subject, then remove them",
		Long: fmt.Sprintf(`Republish a dead letter (SEQ) or every one the filters select (--all) to its
original subject through JetStream, with its original body and headers and
Idem-Replay-Of: <SEQ>, Idem-Replay-Count: <n+1>. The dead letter is deleted
only after JetStream has stored the replay: a dead letter is never lost, and
a failure between the two leaves it in place, to be replayed again or purged
(a second replay is harmless: loads are idempotent).

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

Exit code 1 when any dead letter was not replayed (failed or skipped).`, maxReplays),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && all:
				return &UsageError{errors.New("give SEQ or --all, not both")}
			case len(args) == 0 && !all:
				return &UsageError{errors.New("give the SEQ of a dead letter, or --all (see 'idem dlq ls')")}
			case len(args) == 1 && f.any():
				return &UsageError{errors.New("--dataset, --kind and --since select dead letters for --all; with SEQ, leave them out")}
			}
			if err := f.parse(time.Now()); err != nil {
				return err
			}
			var seq uint64
			if len(args) == 1 {
				var err error
				if seq, err = parseDLQSeq(args[0]); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			q, err := e.openDLQ(ctx, "idem dlq replay")
			if err != nil {
				return err
			}
			defer q.close()
			var dls []deadLetterEntry
			if all {
				if dls, err = q.scan(ctx, f, true); err != nil {
					return err
				}
			} else {
				dl, err := q.get(ctx, seq)
				if err != nil {
					return err
				}
				dls = []deadLetterEntry{dl}
			}
			rep := replayReport{DryRun: dryRun, Matched: len(dls), Messages: []replayed{}}
			for _, dl := range dls {
				r := q.replay(ctx, dl, dryRun, force)
				switch r.Action {
				case "replayed":
					rep.Replayed++
				case "skipped":
					rep.Skipped++
				case "failed":
					rep.Failed++
				}
				rep.Messages = append(rep.Messages, r)
				if !asJSON {
					printReplayed(e.out, r)
				}
			}
			if asJSON {
				if err := printJSON(e.out, rep); err != nil {
					return err
				}
			} else if dryRun {
				fmt.Fprintf(e.out, "dry run: would replay %d, skip %d of %d dead letter(s); nothing was published or deleted\n",
					len(dls)-rep.Skipped, rep.Skipped, len(dls))
			} else {
				fmt.Fprintf(e.out, "replayed %d, skipped %d, failed %d of %d dead letter(s)\n", rep.Replayed, rep.Skipped, rep.Failed, len(dls))
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
	c.Flags().BoolVar(&force, "force", false, fmt.Sprintf("replay even dead letters already replayed %d times or more", maxReplays))
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// replay republishes dl and, once JetStream has stored the replay, deletes
// the dead letter; in that order only, so it is never in neither place.
func (q *dlqStream) replay(ctx context.Context, dl deadLetterEntry, dryRun, force bool) replayed {
	r := replayed{Seq: dl.Seq, Dataset: dl.Dataset, Partition: dl.Partition, RunID: dl.RunID, Kind: dl.Kind,
		Subject: dl.OriginalSubject, ReplayCount: dl.Replays + 1}
	skip := func(format string, a ...any) replayed {
		r.Action, r.Reason = "skipped", fmt.Sprintf(format, a...)
		return r
	}
	switch {
	case dl.OriginalSubject == "":
		return skip("no %s header: not a dead letter idem wrote", consumer.HeaderOriginalSubject)
	case dl.BodyOmitted != "":
		return skip("its body was not kept (%s); publish the event again with 'idem publish'", dl.BodyOmitted)
	case dl.Replays >= maxReplays && !force:
		return skip("already replayed %d times and failed again each time; read 'idem dlq show %d', fix the cause, then replay with --force (or purge it)", dl.Replays, dl.Seq)
	}
	if dryRun {
		r.Action = "would_replay"
		return r
	}
	fail := func(format string, a ...any) replayed {
		r.Action, r.Reason = "failed", fmt.Sprintf(format, a...)
		return r
	}
	msg := &nats.Msg{Subject: dl.OriginalSubject, Header: replayHeader(dl), Data: dl.body}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := q.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(q.cfg.NATS.Stream))
	if err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			return fail("no stream answers on %s (the events stream is %s); the dead letter is kept", dl.OriginalSubject, q.cfg.NATS.Stream)
		}
		return fail("publish to %s: %v; the dead letter is kept", dl.OriginalSubject, err)
	}
	r.Stream, r.StreamSeq = ack.Stream, ack.Sequence
	if ack.Duplicate {
		// Nothing new was stored, so deleting would lose the event.
		return fail("JetStream dropped the replay as a duplicate of seq %d; the dead letter is kept", ack.Sequence)
	}
	// Once the replay is stored, a Ctrl-C must not leave its dead letter
	// behind to be replayed twice.
	if err := q.delete(context.WithoutCancel(ctx), dl.Seq); err != nil {
		return fail("replayed as %s seq %d, but deleting the dead letter failed: %v; purge it with 'idem dlq purge' or leave it (replaying it again is harmless)", ack.Stream, ack.Sequence, err)
	}
	r.Action = "replayed"
	return r
}

// replayHeader is the original's headers as the consumer received them,
// less what must not be sent twice, plus the replay's own marks.
func replayHeader(dl deadLetterEntry) nats.Header {
	h := nats.Header{}
	for k, vs := range dl.header {
		key := k
		renamed := strings.TrimPrefix(k, consumer.HeaderOriginalPrefix)
		switch {
		// The consumer renames only the original's Nats-* and Idem-*;
		// Idem-Original-Subject and the like are the envelope's own.
		case renamed != k && headerHasPrefix(renamed, "Nats-"):
			if !slices.ContainsFunc(restorableNats, func(r string) bool { return strings.EqualFold(r, renamed) }) {
				continue
			}
			key = renamed
		case renamed != k && headerHasPrefix(renamed, "Idem-"):
			if headerHasPrefix(renamed, "Idem-Replay-") {
				continue // replaced below
			}
			key = renamed
		case headerHasPrefix(k, "Idem-"), headerHasPrefix(k, "Nats-"):
			continue // the envelope, and the dead letter's own Nats-Msg-Id
		}
		h[key] = append(h[key], vs...)
	}
	h.Set(headerReplayOf, strconv.FormatUint(dl.Seq, 10))
	h.Set(headerReplayCount, strconv.Itoa(dl.Replays+1))
	return h
}

func headerHasPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func printReplayed(w io.Writer, r replayed) {
	what := fmt.Sprintf("%d %s %s run_id=%s", r.Seq, orDash(terminalSafe(r.Dataset)), orDash(terminalSafe(r.Partition)), orDash(terminalSafe(r.RunID)))
	switch r.Action {
	case "replayed":
		fmt.Fprintf(w, "replayed %s to %s: stream %s seq %d (replay %d)\n", what, r.Subject, r.Stream, r.StreamSeq, r.ReplayCount)
	case "would_replay":
		fmt.Fprintf(w, "would replay %s to %s (replay %d)\n", what, r.Subject, r.ReplayCount)
	default:
		fmt.Fprintf(w, "%s %s: %s\n", r.Action, what, terminalSafe(r.Reason))
	}
}

type purgeReport struct {
	DryRun  bool              `json:"dry_run"`
	Deleted int               `json:"deleted"`
	Failed  int               `json:"failed"`
	Matched []deadLetterEntry `json:"matched"`
}

func dlqPurgeCmd(e *env) *cobra.Command {
	var f dlqFilter
	var yes, dryRun, asJSON bool
	c := &cobra.Command{
		Use:   "purge [--dataset D] [--kind K] [--since T] --yes",
		Short: "Delete dead letters (all, or those the filters select)",
		Long: `Delete the dead letters the filters select (every one without filters), one
by one, so a dead letter stored after the command started is never deleted.
Without --yes nothing is deleted: the command says how many would be and
exits 2; --dry-run lists them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.parse(time.Now()); err != nil {
				return err
			}
			ctx := cmd.Context()
			q, err := e.openDLQ(ctx, "idem dlq purge")
			if err != nil {
				return err
			}
			defer q.close()
			dls, err := q.scan(ctx, f, false)
			if err != nil {
				return err
			}
			if !yes && !dryRun {
				return &UsageError{fmt.Errorf("purge would delete %d dead letter(s) of %s; add --yes to delete them, or --dry-run to list them", len(dls), q.cfg.NATS.DLQStream)}
			}
			rep := purgeReport{DryRun: dryRun, Matched: dls}
			for _, dl := range dls {
				what := fmt.Sprintf("%d %s %s run_id=%s %s", dl.Seq, orDash(terminalSafe(dl.Dataset)), orDash(terminalSafe(dl.Partition)), orDash(terminalSafe(dl.RunID)), orDash(dl.Kind))
				if dryRun {
					if !asJSON {
						fmt.Fprintf(e.out, "would delete %s\n", what)
					}
					continue
				}
				if err := q.delete(ctx, dl.Seq); err != nil {
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
