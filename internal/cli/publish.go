package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/natsconn"
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
func publishEvent(ctx context.Context, js jetstream.JetStream, cfg *config.Config, ev schemas.PartitionReady) (published, error) {
	m, err := schemas.NewMessage(cfg.NATS.SubjectPrefix, ev, cfg.Lookup, time.Now())
	if err != nil {
		return published{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(pctx, &nats.Msg{Subject: m.Subject, Data: m.Body},
		jetstream.WithMsgID(m.MsgID), jetstream.WithExpectStream(cfg.NATS.Stream))
	if err != nil {
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
	var force, asJSON bool
	c := &cobra.Command{
		Use:   "publish DATASET PARTITION",
		Short: "Publish one validated partition-ready event, confirmed by JetStream",
		Long: `Publish one event for DATASET and PARTITION, validated exactly as the consumer
validates it, with Nats-Msg-Id <dataset>:<partition>:<run_id>, and wait for
JetStream's acknowledgement. Prints the stream sequence, or says that JetStream
dropped the event as a duplicate of one inside its duplicate window.

Without --run-id a unique one is made: manual__<UTC timestamp>. The same
run_id as an earlier success is skipped by the consumer unless --force.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := e.validConfig()
			if err != nil {
				return err
			}
			if runID == "" {
				runID = manualRunID(time.Now())
			}
			nc, js, err := e.openNATS(cmd.Context(), cfg, "idem publish")
			if err != nil {
				return err
			}
			defer nc.Close()
			p, err := publishEvent(cmd.Context(), js, cfg, schemas.PartitionReady{Dataset: args[0], Partition: args[1], RunID: runID, Force: force})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.out, p)
			}
			if p.Duplicate {
				fmt.Fprintf(e.out, "duplicate: JetStream already holds %s (seq %d) inside its duplicate window; nothing new was published\n", p.MsgID, p.Seq)
				return nil
			}
			fmt.Fprintf(e.out, "published %s %s run_id=%s to %s: stream %s seq %d\n", p.Dataset, p.Partition, p.RunID, p.Subject, p.Stream, p.Seq)
			return nil
		},
	}
	c.Flags().StringVar(&runID, "run-id", "", "run id (default manual__<UTC timestamp>)")
	c.Flags().BoolVar(&force, "force", false, "rerun even if this run_id already succeeded")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}
