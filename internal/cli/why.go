package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/why"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

func auditWhyCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "why DATASET PARTITION",
		Short: "A partition's whole story, newest first, and what to do next",
		Long: `why tells everything idem knows about one partition: the events that named
it, every attempt and its checks, the ledger's winner, the upstreams that
triggered it and the downstream events it queued, the schema changes its
loads met (on_schema_change) beside their attempts, its dead letters and the
loads run again after a failover. It ends with a one-line verdict and the
command to run next.

Exit codes, as 'idem publish --wait': 0 loaded (outdated too: loaded under an
older definition), 1 dead-lettered or refused by
its checks (a person must act), 2 usage, 3 not loaded yet (loading, retrying,
missing), 4 the audit or NATS could not be read.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := e.configFor(args[0])
			if err != nil {
				return err
			}
			pt, _ := cfg.Lookup(args[0])
			key, err := schemas.ParsePartition(pt, args[1])
			if err != nil {
				return &UsageError{fmt.Errorf("partition %q of %s: %w", args[1], args[0], err)}
			}
			ctx := cmd.Context()
			pool, err := connect(ctx, cfg.Postgres.URL)
			if err != nil {
				return &ExitError{Code: 4, Err: err}
			}
			defer pool.Close()
			src := why.Sources{Pipeline: cfg.Pipeline, DB: pool, Audit: pool}
			var natsErr error
			if nc, js, err := e.openNATS(ctx, cfg, "idem audit why"); err != nil {
				natsErr = err
			} else {
				defer nc.Close()
				if s, err := why.OpenJetStream(ctx, js, cfg); err != nil {
					natsErr = err
				} else {
					src.Streams = s
				}
			}
			r, err := why.Tell(ctx, src, why.DatasetOf(cfg, args[0]), key.Key)
			if err != nil {
				return &ExitError{Code: 4, Err: err}
			}
			if natsErr != nil {
				r.Notes = append([]string{"NATS could not be read: " + natsErr.Error()}, r.Notes...)
			}
			if asJSON {
				if err := printJSON(e.out, r); err != nil {
					return err
				}
			} else if err := renderStory(e.out, r); err != nil {
				return err
			}
			code := r.Verdict.Exit
			if natsErr != nil && code == 0 {
				code = 4
			}
			if code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the story as one JSON object")
	return c
}

// renderStory prints a story for a terminal, newest first, verdict last.
func renderStory(w io.Writer, r why.Report) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	p("%s %s (pipeline %s), as of %s\n", r.Dataset, r.Partition, r.Pipeline, ts(r.At))
	if r.Winner != nil {
		p("\nledger: run %s won at %s (audit id %d, %d load(s))\n", r.Winner.RunID, ts(r.Winner.SucceededAt), r.Winner.AuditID, r.Winner.Loads)
	} else {
		p("\nledger: no run has loaded it\n")
	}
	if len(r.Events) > 0 {
		p("\nevents (%d):\n", len(r.Events))
		for _, ev := range r.Events {
			if ev.Gone {
				p("  seq %d  run %s  no longer in the events stream\n", ev.Seq, ev.RunID)
				continue
			}
			p("  seq %d  %s  run %s", ev.Seq, ts(ev.Published), ev.RunID)
			if ev.Force {
				p("  force")
			}
			if ev.MsgID != "" {
				p("  msg-id %s", ev.MsgID)
			}
			if ev.Publisher != "" {
				p("  by %s", ev.Publisher)
			}
			if ev.TraceID != "" {
				p("  trace %s", ev.TraceID)
			}
			p("\n")
		}
	}
	if w := r.Waiting; w != nil {
		state := "waiting for its source"
		if w.GaveUp {
			state = "gave up waiting for its source"
		}
		p("\n%s since %s, run %s, no attempt spent: %s\n  checked %d time(s), last at %s; gives up at %s\n",
			state, ts(w.Since), w.RunID, oneLine(w.Reason, 300), w.Checks, ts(w.CheckedAt), ts(w.GivesUpAt))
	}
	p("\nattempts (%d):\n", len(r.Attempts))
	if len(r.Attempts) == 0 {
		p("  none\n")
	}
	for _, a := range r.Attempts {
		p("  #%d  %s  %-7s run %s attempt %d", a.ID, ts(a.StartedAt), a.Status, a.RunID, a.Attempt)
		if a.Force {
			p(" force")
		}
		if a.StreamSeq != nil {
			p("  seq %d", *a.StreamSeq)
		}
		if a.FinishedAt != nil {
			p("  %s", a.Duration().Round(time.Millisecond))
		}
		if a.Rows != nil {
			p("  %d rows", *a.Rows)
		}
		if a.Reverify {
			p("  (loaded again after a failover)")
		}
		if a.TriggeredBy != "" {
			p("  triggered by %s", a.TriggeredBy)
		}
		if a.Error != "" {
			p("\n        %s: %s", orDash(a.ErrorKind), oneLine(a.Error, 300))
		}
		p("\n")
		for _, c := range r.Checks {
			if c.AuditID == a.ID {
				p("        check %s (%s, %s): %s, %d of %d rows failing\n", c.Name, c.Kind, c.Severity, c.Status, c.Failing, c.Checked)
			}
		}
		for _, c := range r.SchemaChanges {
			if c.AuditID == a.ID {
				p("        %s\n", schemaChangeLine(c))
			}
		}
		for _, fs := range r.SourceFiles {
			if fs.AuditID != a.ID {
				continue
			}
			p("        read %d file(s), listing %s:\n", len(fs.Files), short(fs.Fingerprint))
			for _, f := range fs.Files {
				p("          %s  %d bytes  %s  %d rows\n", f.URL, f.Size, fileIdentity(f), f.Rows)
			}
		}
	}
	// Changes of attempts older than those shown keep their own list.
	shown := map[int64]bool{}
	for _, a := range r.Attempts {
		shown[a.ID] = true
	}
	var older []audit.SchemaChangeRow
	for _, c := range r.SchemaChanges {
		if !shown[c.AuditID] {
			older = append(older, c)
		}
	}
	if len(older) > 0 {
		p("\nschema changes of attempts not shown:\n")
		for _, c := range older {
			p("  #%d  %s  run %s  %s\n", c.AuditID, ts(c.At), c.RunID, schemaChangeLine(c))
		}
	}
	if len(r.Upstreams) > 0 {
		p("\nupstreams:\n")
		for _, u := range r.Upstreams {
			state := "never ran for this partition"
			if u.Status != "" {
				state = u.Status + " (run " + u.RunID + ")"
				if u.FinishedAt != nil {
					state += " at " + ts(*u.FinishedAt)
				}
			}
			if u.Triggered {
				state += ", triggered a load of this one"
			}
			p("  %s: %s\n", u.Dataset, state)
		}
	}
	if len(r.Downstream) > 0 {
		p("\ndownstream events:\n")
		for _, d := range r.Downstream {
			state := "pending"
			if d.SentAt != nil {
				state = "sent " + ts(*d.SentAt)
				if d.StreamSeq != nil {
					state += fmt.Sprintf(", seq %d", *d.StreamSeq)
				}
			} else if d.LastError != "" {
				state += fmt.Sprintf(" after %d publish attempt(s): %s", d.Attempts, oneLine(d.LastError, 200))
			}
			p("  %s %s run %s: %s\n", d.Dataset, d.Partition, d.RunID, state)
		}
	}
	if len(r.DeadLetters) > 0 {
		p("\ndead letters:\n")
		for _, d := range r.DeadLetters {
			p("  seq %d  %s  %s  run %s: %s\n      replay: idem dlq replay %d\n", d.Seq, ts(d.FailedAt), d.Kind, d.RunID, oneLine(d.Error, 300), d.Seq)
		}
	}
	if len(r.Actions) > 0 {
		p("\noperator actions:\n")
		for _, a := range r.Actions {
			p("  %s  %s by %s: %s\n", ts(a.RequestedAt), a.Action, a.RequestedBy, orDash(a.Outcome))
		}
	}
	for _, n := range r.Notes {
		p("\nnote: %s\n", n)
	}
	p("\n%s: %s\n", strings.ToUpper(strings.ReplaceAll(r.Verdict.State, "_", " ")), r.Verdict.Line)
	if r.Verdict.Next != "" {
		p("  %s\n", r.Verdict.Next)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// schemaChangeLine is one schema change as the story prints it:
// "column note: new_column text, added (append_new_columns): ALTER TABLE ...".
func schemaChangeLine(c audit.SchemaChangeRow) string {
	types := c.NewType
	switch c.Change {
	case strategies.ChangeRetyped:
		types = c.OldType + " -> " + c.NewType
	case strategies.ChangeMissing:
		types = c.OldType
	}
	line := fmt.Sprintf("column %s: %s %s, %s (%s)", c.Column, c.Change, types, c.Action, c.Policy)
	switch {
	case c.Reason != "" && c.DDL != "":
		line += ": " + oneLine(c.Reason, 200) + "; fix: " + c.DDL
	case c.Reason != "":
		line += ": " + oneLine(c.Reason, 300)
	case c.DDL != "":
		line += ": " + c.DDL
	}
	return line
}

// oneLine keeps an error on one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// short is the first 12 characters of a fingerprint.
func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// fileIdentity is what names a file's version: its ETag and version id in
// object storage, its SHA-256 on disk.
func fileIdentity(f audit.SourceFile) string {
	switch {
	case f.ETag != "" && f.VersionID != "":
		return "etag " + f.ETag + " version " + f.VersionID
	case f.ETag != "":
		return "etag " + f.ETag
	case f.SHA256 != "":
		return "sha256 " + short(f.SHA256)
	}
	return "-"
}
