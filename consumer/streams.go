package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

const (
	// DefaultDuplicates is the events and dead-letter streams' duplicate
	// window. Dead letters rely on it: see the package doc.
	DefaultDuplicates = 2 * time.Minute
	// DefaultMaxAckPending is JetStream's own default, shared by every replica
	// of the durable consumer.
	DefaultMaxAckPending = 1000
	// reconcilerAckWait is the advisory consumer's ack wait. It must stay
	// under the dead-letter stream's duplicate window: an advisory redelivered
	// after a lost ack is then deduplicated.
	reconcilerAckWait = 30 * time.Second
)

// StreamsConfig is what EnsureStreams creates: Config.Streams derives it.
type StreamsConfig struct {
	Stream           string // events stream, subjects <SubjectPrefix>.>
	SubjectPrefix    string
	DLQStream        string // dead letters, subjects <DLQSubjectPrefix>.>
	DLQSubjectPrefix string
	// AdvisoryStream captures the consumer's max-deliveries advisories
	// (work-queue retention). Default Stream+"_ADVISORIES".
	AdvisoryStream string
	Consumer       string        // durable pull consumer on Stream
	AckWait        time.Duration // required
	// MaxDeliver is the consumer's delivery cap: the largest dataset budget.
	MaxDeliver int
	// MaxAckPending is shared by all replicas. Default DefaultMaxAckPending.
	MaxAckPending int
	// Duplicates is the duplicate window of a stream idem creates. Default
	// DefaultDuplicates.
	Duplicates time.Duration
	// Replicas of a stream idem creates; default 1, use 3 in production.
	// Consumers inherit their stream's.
	Replicas int
}

// WithDefaults returns s with zero fields that have a default filled.
func (s StreamsConfig) WithDefaults() StreamsConfig {
	if s.AdvisoryStream == "" && s.Stream != "" {
		s.AdvisoryStream = s.Stream + "_ADVISORIES"
	}
	if s.MaxAckPending == 0 {
		s.MaxAckPending = DefaultMaxAckPending
	}
	setDuration(&s.Duplicates, DefaultDuplicates)
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	return s
}

// Validate reports every problem of s, naming the field.
func (s StreamsConfig) Validate() error {
	c := Config{
		Stream: s.Stream, DLQStream: s.DLQStream, AdvisoryStream: s.AdvisoryStream, Consumer: s.Consumer,
		SubjectPrefix: s.SubjectPrefix, DLQSubjectPrefix: s.DLQSubjectPrefix, AckWait: s.AckWait, MaxInFlight: 1,
	}
	errs := []error{c.Validate()}
	if s.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("consumer: MaxDeliver %d must be at least 1", s.MaxDeliver))
	}
	if s.Replicas < 1 {
		errs = append(errs, fmt.Errorf("consumer: Replicas %d must be at least 1", s.Replicas))
	}
	return errors.Join(errs...)
}

// ReconcilerName is the durable consumer on the advisory stream.
func (s StreamsConfig) ReconcilerName() string { return s.Consumer + "_reconciler" }

// MaxDeliveriesSubject is the advisory JetStream publishes when a message of
// consumer on stream reaches MaxDeliver.
func MaxDeliveriesSubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// EnsureStreams creates what is missing: the events stream, the dead-letter
// stream, the advisory stream, the durable consumer and the reconciler's
// consumer. An existing stream only ever gains subjects: a retention or
// storage other than idem's is an error naming the stream and the difference,
// never a silent change. The consumers are created or updated to cfg.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	streams := []jetstream.StreamConfig{{
		Name:        cfg.Stream,
		Description: "idem: partition-ready events",
		Subjects:    []string{cfg.SubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  cfg.Duplicates,
		Replicas:    cfg.Replicas,
	}, {
		Name:        cfg.DLQStream,
		Description: "idem: dead letters",
		Subjects:    []string{cfg.DLQSubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  cfg.Duplicates,
		Replicas:    cfg.Replicas,
	}, {
		Name:        cfg.AdvisoryStream,
		Description: "idem: max-deliveries advisories awaiting the reconciler",
		Subjects:    []string{MaxDeliveriesSubject(cfg.Stream, cfg.Consumer)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}}
	for _, s := range streams {
		if err := ensureStream(ctx, js, s); err != nil {
			return err
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{
		Durable:       cfg.Consumer,
		Description:   "idem: loads partitions",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		MaxAckPending: cfg.MaxAckPending,
		FilterSubject: cfg.SubjectPrefix + ".>",
	}); err != nil {
		return fmt.Errorf("consumer: create or update consumer %s on stream %s: %w", cfg.Consumer, cfg.Stream, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, cfg.AdvisoryStream, jetstream.ConsumerConfig{
		Durable:       cfg.ReconcilerName(),
		Description:   "idem: dead-letters messages that exhausted their deliveries without a verdict",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       reconcilerAckWait,
		MaxDeliver:    -1, // a failed dead letter is retried until it succeeds
		FilterSubject: MaxDeliveriesSubject(cfg.Stream, cfg.Consumer),
	}); err != nil {
		return fmt.Errorf("consumer: create or update consumer %s on stream %s: %w", cfg.ReconcilerName(), cfg.AdvisoryStream, err)
	}
	return nil
}

// ensureStream creates want, or checks an existing stream of that name: its
// retention and storage must be want's, and it gains want's missing subjects.
// Everything else the operator set (limits, replicas, duplicate window) stays.
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("consumer: create stream %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer: look up stream %s: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	var diffs []string
	if have.Retention != want.Retention {
		diffs = append(diffs, fmt.Sprintf("retention %s (idem needs %s)", have.Retention, want.Retention))
	}
	if have.Storage != want.Storage {
		diffs = append(diffs, fmt.Sprintf("storage %s (idem needs %s)", have.Storage, want.Storage))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("consumer: stream %s exists with %s; idem never changes an existing stream's retention or storage: "+
			"migrate the stream by hand or configure another stream name", want.Name, strings.Join(diffs, " and "))
	}
	var missing []string
	for _, w := range want.Subjects {
		if !slices.ContainsFunc(have.Subjects, func(h string) bool { return subjectCovers(h, w) }) {
			missing = append(missing, w)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	have.Subjects = append(have.Subjects, missing...)
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return fmt.Errorf("consumer: add subjects %s to stream %s: %w", strings.Join(missing, ", "), want.Name, err)
	}
	return nil
}

// subjectCovers reports whether every subject matching want also matches
// have, tokens compared with NATS wildcards ("*" one token, ">" the rest).
func subjectCovers(have, want string) bool {
	h, w := strings.Split(have, "."), strings.Split(want, ".")
	for i, ht := range h {
		switch {
		case ht == ">":
			return i < len(w)
		case i >= len(w):
			return false
		case ht == "*":
			if w[i] == ">" {
				return false
			}
		case ht != w[i]:
			return false
		}
	}
	return len(h) == len(w)
}
