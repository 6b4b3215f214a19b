package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/natsconn"
	"github.com/idem-data/idem/internal/results"
	"github.com/idem-data/idem/internal/resultstream"
	"github.com/idem-data/idem/internal/tracing"
	"github.com/idem-data/idem/schemas"
)

// openNATS connects for a one-shot command (no reconnect logging on stderr).
func (e *env) openNATS(ctx context.Context, cfg *config.Config, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := natsconn.Connect(ctx, cfg.NATS, name, zerolog.Nop())
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// published is the answer of one confirmed publish.
type published struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	RunID     string `json:"run_id"`
	Subject   string `json:"subject"`
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	// Duplicate: JetStream already held an event with this Nats-Msg-Id inside
	// its duplicate window and dropped this one.
	Duplicate bool   `json:"duplicate"`
	MsgID     string `json:"msg_id"`
}

// publishEvent publishes ev through JetStream, as schemas derives its
// message (validated as the consumer will validate it), and waits for the
// PubAck.
//
// The event carries ctx's trace context in a lower-case traceparent, under
// a publish span of tracer.
func publishEvent(ctx context.Context, js jetstream.JetStream, tracer trace.Tracer, cfg *config.Config, ev schemas.PartitionReady) (published, error) {
	m, err := schemas.NewMessage(cfg.NATS.SubjectPrefix, ev, cfg.Lookup, time.Now())
	if err != nil {
		return published{}, err
	}
	msg := &nats.Msg{Subject: m.Subject, Data: m.Body, Header: nats.Header{}}
	ctx, span := tracing.StartPublish(ctx, tracer, tracing.Message{Subject: m.Subject, Header: msg.Header, MsgID: m.MsgID, BodySize: len(m.Body)})
	defer span.End()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(pctx, msg, jetstream.WithMsgID(m.MsgID), jetstream.WithExpectStream(cfg.NATS.Stream))
	if err != nil {
		span.SetStatus(codes.Error, "not stored")
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			return published{}, fmt.Errorf("no stream %s answers on %s: run 'idem streams' (or start 'idem serve') first: %w", cfg.NATS.Stream, m.Subject, err)
		}
		if why, ok := natsconn.StoreRefused(err); ok {
			return published{}, fmt.Errorf("stream %s refused the event, nothing was published: %s; make room (are the consumers keeping up? check the stream's limits and max_age) and publish again: %w",
				cfg.NATS.Stream, why, err)
		}
		return published{}, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	return published{Dataset: m.Event.Dataset, Partition: m.Event.Partition, RunID: m.Event.RunID, Subject: m.Subject,
		Stream: ack.Stream, Seq: ack.Sequence, Duplicate: ack.Duplicate, MsgID: m.MsgID}, nil
}

// manualRunID is a unique, readable run id for a hand-made publish.
func manualRunID(now time.Time) string {
	return "manual__" + now.UTC().Format("20060102T150405.000Z")
}

func publishCmd(e *env) *cobra.Command {
	var runID string
	var force, asJSON, wait bool
	var timeout time.Duration
	var attrs []string
	c := &cobra.Command{
		Use:   "publish DATASET PARTITION",
		Short: "Publish one validated partition-ready event, confirmed by JetStream; --wait follows it to its outcome",
		Long: `Publish one event for DATASET and PARTITION, validated exactly as the consumer
validates it, with Nats-Msg-Id <dataset>:<partition>:<run_id>, and wait for
JetStream's acknowledgement. Prints the stream sequence, or says that JetStream
dropped the event as a duplicate of one inside its duplicate window.

Without --run-id a unique one is made: manual__<UTC timestamp>. The same
run_id as an earlier success is skipped by the consumer unless --force.

--wait follows the event to its outcome on the results stream, with NATS
access only (no warehouse credentials): progress on stderr, then one JSON
object as the last stdout line (dataset, partition, run_id, status, rows,
attempts, error, seconds, ...). A retried event is followed to its final
outcome. Run the same command again after a timeout: it waits again, and the
same run_id never loads twice (a duplicate follows the original event; a
later one is skipped by the ledger).

Exit codes with --wait:
  0  loaded, or already loaded by that run_id (status loaded or skipped)
  1  failed for good: dead-lettered, or rejected by its checks
  2  usage or config
  3  not finished within --timeout (still queued or loading; nothing cancelled)
  4  NATS, the results stream or the dead-letter stream unreachable`,
		Example: `  idem publish orders 2026-11-05 --run-id scheduled__2026-11-05 --wait --timeout 30m`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case cmd.Flags().Changed("timeout") && !wait:
				return &UsageError{errors.New("--timeout bounds --wait: add --wait")}
			case wait && timeout <= 0:
				return &UsageError{fmt.Errorf("--timeout %s: want a positive duration such as 30m", timeout)}
			}
			cfg, err := e.validConfig()
			if err != nil {
				if wait {
					return &ExitError{Code: 2, Err: err}
				}
				return err
			}
			if runID == "" {
				runID = manualRunID(time.Now())
			}
			ctx, tracer, stopTracing, err := e.startTracing(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer stopTracing()
			nc, js, err := e.openNATS(cmd.Context(), cfg, "idem publish")
			if err != nil {
				if wait {
					return &ExitError{Code: 4, Err: err}
				}
				return err
			}
			defer nc.Close()
			f := follower(js, cfg)
			if wait {
				// Before publishing: an event nobody can follow is not sent.
				if err := f.Check(cmd.Context()); err != nil {
					return &ExitError{Code: 4, Err: err}
				}
			}
			ev := schemas.PartitionReady{Dataset: args[0], Partition: args[1], RunID: runID, Force: force}
			for _, kv := range attrs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return &UsageError{fmt.Errorf("--attribute %q: want key=value", kv)}
				}
				if ev.Attributes == nil {
					ev.Attributes = map[string]string{}
				}
				ev.Attributes[k] = v
			}
			p, err := publishEvent(ctx, js, tracer, cfg, ev)
			if err != nil {
				if wait {
					var unusable *schemas.InvalidEventError
					if errors.As(err, &unusable) {
						return &ExitError{Code: 2, Err: err}
					}
					return &ExitError{Code: 4, Err: err}
				}
				return err
			}
			if !wait {
				if asJSON {
					return printJSON(e.out, p)
				}
				if p.Duplicate {
					fmt.Fprintf(e.out, "duplicate: JetStream already holds %s (seq %d) inside its duplicate window; nothing new was published\n", p.MsgID, p.Seq)
					return nil
				}
				fmt.Fprintf(e.out, "published %s %s run_id=%s to %s: stream %s seq %d\n", p.Dataset, p.Partition, p.RunID, p.Subject, p.Stream, p.Seq)
				return nil
			}
			return waitPublished(cmd.Context(), e, f, p, timeout)
		},
	}
	c.Flags().StringVar(&runID, "run-id", "", "run id (default manual__<UTC timestamp>)")
	c.Flags().BoolVar(&force, "force", false, "rerun even if this run_id already succeeded")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	c.Flags().StringArrayVar(&attrs, "attribute", nil, "key=value attribute of the event, repeatable (e.g. openlineage_parent_id=ns/job/run)")
	c.Flags().BoolVar(&wait, "wait", false, "follow the event to its outcome (exit codes above; the last stdout line is JSON)")
	c.Flags().DurationVar(&timeout, "timeout", time.Hour, "with --wait, give up waiting after this long (exit 3)")
	return c
}

// follower reads the results of cfg's events.
func follower(js jetstream.JetStream, cfg *config.Config) *resultstream.Follower {
	return &resultstream.Follower{JS: js, Pipeline: cfg.Pipeline, Events: cfg.NATS.Stream, Consumer: cfg.NATS.Consumer,
		Stream: cfg.NATS.Results.Stream, Prefix: cfg.NATS.Results.SubjectPrefix,
		DLQStream: cfg.NATS.DLQStream, DLQPrefix: cfg.NATS.DLQSubjectPrefix}
}

// waited is the last stdout line of a wait that did not reach an outcome.
type waited struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	RunID     string `json:"run_id"`
	Status    string `json:"status"` // waiting (3) or unreachable (4)
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	Error     string `json:"error"`
}

// waitPublished follows p to its outcome and renders it: progress on
// stderr, one JSON object as the last stdout line, the exit code.
func waitPublished(ctx context.Context, e *env, f *resultstream.Follower, p published, timeout time.Duration) error {
	what := fmt.Sprintf("%s %s run_id=%s (event %d of %s)", p.Dataset, p.Partition, p.RunID, p.Seq, p.Stream)
	if p.Duplicate {
		fmt.Fprintf(e.errOut, "idem: JetStream already holds %s: following that event, %s, for up to %s\n", p.MsgID, what, timeout)
	} else {
		fmt.Fprintf(e.errOut, "idem: published %s; waiting up to %s\n", what, timeout)
	}
	r, err := f.Wait(ctx, p.Dataset, p.Seq, timeout, func(s string) { fmt.Fprintf(e.errOut, "idem: %s\n", s) })
	if err != nil {
		w := waited{Dataset: p.Dataset, Partition: p.Partition, RunID: p.RunID, Status: "waiting", Stream: p.Stream, StreamSeq: p.Seq, Error: err.Error()}
		code := 3
		var unreachable *resultstream.Unreachable
		if errors.As(err, &unreachable) {
			w.Status, code = "unreachable", 4
		} else if !errors.Is(err, resultstream.ErrTimeout) {
			return err // interrupted
		}
		fmt.Fprintf(e.errOut, "idem: %s: %v\n", what, err)
		if code == 3 {
			fmt.Fprintf(e.errOut, "idem: nothing was cancelled; run the same command again to keep waiting (the same run_id never loads twice)\n")
		}
		if perr := printJSONLine(e.out, w); perr != nil {
			return perr
		}
		return &ExitError{Code: code}
	}
	switch r.Status {
	case results.StatusLoaded:
		rows := int64(0)
		if r.Rows != nil {
			rows = r.Rows.Inserted + r.Rows.Updated
		}
		fmt.Fprintf(e.errOut, "idem: loaded %s: %d row(s) written, attempt %d, %.1fs after publishing\n", what, rows, r.Attempts, r.Seconds)
	case results.StatusSkipped:
		fmt.Fprintf(e.errOut, "idem: skipped %s: run_id %s had already loaded this partition; nothing done\n", what, r.RunID)
	default:
		fmt.Fprintf(e.errOut, "idem: %s %s (%s): %s\n", r.Status, what, r.ErrorKind, r.Error)
		if r.DeadLetterSeq > 0 {
			fmt.Fprintf(e.errOut, "idem: dead letter %d: fix the data or the config, then idem dlq replay %d\n", r.DeadLetterSeq, r.DeadLetterSeq)
		}
	}
	if err := printJSONLine(e.out, r); err != nil {
		return err
	}
	if !r.Done() {
		return &ExitError{Code: 1}
	}
	return nil
}
