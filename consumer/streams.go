package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/internal/defaults"
	"github.com/idem-data/idem/schemas"
)

const (
	// DefaultDuplicates is the events and results streams' duplicate
	// window.
	DefaultDuplicates = defaults.Duplicates
	// DefaultDeadLetterDuplicates is the dead-letter stream's duplicate
	// window. Dead letters rely on it: see the package doc.
	DefaultDeadLetterDuplicates = defaults.DeadLetterDuplicates
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
	AckWait        time.Duration // required, shorter than Duplicates
	// MaxDeliver is the consumer's delivery cap: the largest dataset budget.
	MaxDeliver int
	// MaxAckPending is shared by all replicas. Default DefaultMaxAckPending.
	MaxAckPending int
	// Duplicates is the duplicate window of a stream idem creates, longer
	// than AckWait and the reconciler's 30s ack wait. Default
	// DefaultDuplicates.
	Duplicates time.Duration
	// DeadLetterDuplicates is the dead-letter stream's duplicate window, at
	// least Duplicates. Default DefaultDeadLetterDuplicates. EnsureStreams
	// raises an existing dead-letter stream's shorter window to it.
	DeadLetterDuplicates time.Duration
	// Replicas of a stream idem creates; default 1, use 3 in production.
	// Consumers inherit their stream's.
	Replicas int
	// ResultsStream, when set, holds every event's terminal outcome
	// (subjects <ResultsSubjectPrefix>.>), kept ResultsMaxAge and at most
	// ResultsMaxBytes (the oldest go first); 0 is no limit.
	ResultsStream, ResultsSubjectPrefix string
	ResultsMaxAge                       time.Duration
	ResultsMaxBytes                     int64
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
	setDuration(&s.DeadLetterDuplicates, max(DefaultDeadLetterDuplicates, s.Duplicates))
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
		BackfillShare: DefaultBackfillShare,
	}
	errs := []error{c.Validate()}
	if s.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("consumer: MaxDeliver %d must be at least 1", s.MaxDeliver))
	}
	if s.Replicas < 1 {
		errs = append(errs, fmt.Errorf("consumer: Replicas %d must be at least 1", s.Replicas))
	}
	// A dead letter published again after a lost Term (AckWait) or a lost
	// advisory ack (reconcilerAckWait) is deduplicated only within the window.
	if s.Duplicates <= max(s.AckWait, reconcilerAckWait) {
		errs = append(errs, fmt.Errorf("consumer: Duplicates %s must be longer than AckWait %s and %s, or a dead letter published twice is stored twice",
			s.Duplicates, s.AckWait, reconcilerAckWait))
	}
	if s.DeadLetterDuplicates < s.Duplicates {
		errs = append(errs, fmt.Errorf("consumer: DeadLetterDuplicates %s must be at least Duplicates %s", s.DeadLetterDuplicates, s.Duplicates))
	}
	return errors.Join(errs...)
}

// ReconcilerName is the durable consumer on the advisory stream.
func (s StreamsConfig) ReconcilerName() string { return s.Consumer + "_reconciler" }

// BackfillName is the durable consumer of the backfill lane: Consumer's
// name and "_backfill". It reads <BackfillSubjectPrefix>.>; Consumer reads
// <SubjectPrefix>.>.
func (s StreamsConfig) BackfillName() string { return backfillName(s.Consumer) }

// BackfillSubjectPrefix is the prefix of the backfill lane's subjects
// (schemas.BackfillPrefix): idem.backfill for idem.ready.
func (s StreamsConfig) BackfillSubjectPrefix() string { return schemas.BackfillPrefix(s.SubjectPrefix) }

func backfillName(consumer string) string { return consumer + "_backfill" }

// MaxDeliveriesSubject is the advisory JetStream publishes when a message of
// consumer on stream reaches MaxDeliver.
func MaxDeliveriesSubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// Drift is one setting of an existing durable consumer that differs from
// what the config wants. EnsureStreams leaves it, ApplyStreams changes it.
type Drift struct {
	Stream   string // the consumer's stream
	Consumer string // the durable name
	Field    string // the setting's JSON name, e.g. max_deliver
	Server   string // the server's value
	Config   string // the config's value
}

// String formats d as the change ApplyStreams makes:
// "consumer idem: max_deliver 4 -> 20".
func (d Drift) String() string {
	return fmt.Sprintf("consumer %s: %s %s -> %s", d.Consumer, d.Field, d.Server, d.Config)
}

// EnsureStreams creates what is missing: the events stream, the dead-letter
// stream, the advisory stream, the results stream, the live and the backfill
// durable consumers and the reconciler's consumer. An existing stream only
// ever gains subjects, and the dead-letter stream a longer duplicate window
// (the upgrade from the 2-minute one): a retention or storage other than
// idem's is an error naming the stream and the difference, never a silent
// change. An existing consumer is left as it is, so replicas
// of two versions do not overwrite each other's settings during a rolling
// deploy: ConsumerDrift says how it differs, ApplyStreams changes it. The
// one exception is a filter missing or narrower than idem's (widenFilter).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	for _, s := range cfg.streams() {
		if err := ensureStream(ctx, js, s, s.Name == cfg.DLQStream); err != nil {
			return err
		}
	}
	for _, c := range cfg.consumers() {
		have, err := lookupConsumer(ctx, js, c)
		if err != nil {
			return err
		}
		if have != nil {
			if err := widenFilter(ctx, js, c, *have); err != nil {
				return err
			}
			continue
		}
		// Another replica may create it meanwhile, with its own version's
		// settings: ErrConsumerExists then, and ConsumerDrift tells.
		if _, err := js.CreateConsumer(ctx, c.stream, c.config); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			return fmt.Errorf("consumer: create consumer %s on stream %s: %w", c.config.Durable, c.stream, err)
		}
	}
	return nil
}

// widenFilter is the one change EnsureStreams makes to an existing
// consumer, the upgrade to the lanes: a filter that is missing, or that
// lacks some of the subjects idem now filters on, becomes idem's. A live
// durable without a filter would otherwise read the backfill subjects as
// well, and a reconciler of the live durable alone would miss the backfill
// durable's advisories. A filter an operator set otherwise stays, and
// ConsumerDrift reports it.
func widenFilter(ctx context.Context, js jetstream.JetStream, c consumerSpec, have jetstream.ConsumerConfig) error {
	want := strings.Split(filterSubjects(c.config), ",")
	got := strings.Split(filterSubjects(have), ",")
	if slices.Equal(got, want) || (got[0] != "(none)" && !isSubset(got, want)) {
		return nil
	}
	have.FilterSubject, have.FilterSubjects = c.config.FilterSubject, c.config.FilterSubjects
	if _, err := js.UpdateConsumer(ctx, c.stream, have); err != nil {
		return fmt.Errorf("consumer: set the filter of consumer %s on stream %s to %s: %w", c.config.Durable, c.stream, strings.Join(want, ","), err)
	}
	return nil
}

func isSubset(sub, of []string) bool {
	for _, s := range sub {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
}

// ConsumerDrift compares the durable consumer and the reconciler's consumer
// on the server with cfg, in the settings idem sets (ack and deliver policy,
// ack wait, max deliver, max ack pending, filter subject), and returns every
// difference; a missing consumer has none. It changes nothing.
func ConsumerDrift(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig) ([]Drift, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var drifts []Drift
	for _, c := range cfg.consumers() {
		have, err := lookupConsumer(ctx, js, c)
		if err != nil {
			return nil, err
		}
		if have != nil {
			drifts = append(drifts, c.diff(*have)...)
		}
	}
	return drifts, nil
}

// ApplyStreams is EnsureStreams, then it updates each existing consumer to
// cfg in the settings ConsumerDrift compares, and returns what it changed.
// Other settings an operator gave a consumer stay. JetStream cannot change
// an existing consumer's ack or deliver policy: such a difference is an
// error, and nothing of that consumer is changed.
func ApplyStreams(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig) ([]Drift, error) {
	if err := EnsureStreams(ctx, js, cfg); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	var changed []Drift
	for _, c := range cfg.consumers() {
		have, err := lookupConsumer(ctx, js, c)
		if err != nil {
			return changed, err
		}
		if have == nil {
			return changed, fmt.Errorf("consumer: consumer %s on stream %s was removed while idem streams ran; run it again", c.config.Durable, c.stream)
		}
		drifts := c.diff(*have)
		if len(drifts) == 0 {
			continue
		}
		for _, d := range drifts {
			if d.Field == "ack_policy" || d.Field == "deliver_policy" {
				return changed, fmt.Errorf("consumer: consumer %s on stream %s has %s %s, idem needs %s, and JetStream cannot change it on an existing consumer: "+
					"remove the consumer (nats consumer rm %s %s) and run idem streams again to create it", d.Consumer, d.Stream, d.Field, d.Server, d.Config, d.Stream, d.Consumer)
			}
		}
		if _, err := js.UpdateConsumer(ctx, c.stream, c.applyTo(*have)); err != nil {
			return changed, fmt.Errorf("consumer: update consumer %s on stream %s: %w", c.config.Durable, c.stream, err)
		}
		changed = append(changed, drifts...)
	}
	return changed, nil
}

// streams are the streams idem needs: events, dead letters, advisories and,
// when configured, results.
func (cfg StreamsConfig) streams() []jetstream.StreamConfig {
	ss := []jetstream.StreamConfig{{
		Name:        cfg.Stream,
		Description: "idem: partition-ready events",
		Subjects:    []string{cfg.SubjectPrefix + ".>", cfg.BackfillSubjectPrefix() + ".>"},
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
		Duplicates:  cfg.DeadLetterDuplicates,
		Replicas:    cfg.Replicas,
	}, {
		Name:        cfg.AdvisoryStream,
		Description: "idem: max-deliveries advisories awaiting the reconciler",
		Subjects:    cfg.advisorySubjects(),
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}}
	if cfg.ResultsStream == "" {
		return ss
	}
	return append(ss, jetstream.StreamConfig{
		Name:        cfg.ResultsStream,
		Description: "idem: every event's terminal outcome (idem publish --wait)",
		Subjects:    []string{cfg.ResultsSubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.ResultsMaxAge,
		MaxBytes:    max(cfg.ResultsMaxBytes, -1),
		Duplicates:  cfg.Duplicates,
		Replicas:    cfg.Replicas,
	})
}

// consumerSpec is one durable consumer idem needs and the stream it is on.
type consumerSpec struct {
	stream string
	config jetstream.ConsumerConfig
}

// advisorySubjects are the max-deliveries advisories of both lanes'
// durables.
func (cfg StreamsConfig) advisorySubjects() []string {
	return []string{MaxDeliveriesSubject(cfg.Stream, cfg.Consumer), MaxDeliveriesSubject(cfg.Stream, cfg.BackfillName())}
}

// consumers are the live and the backfill lane's durables and the
// reconciler's consumer.
func (cfg StreamsConfig) consumers() []consumerSpec {
	return []consumerSpec{{cfg.Stream, jetstream.ConsumerConfig{
		Durable:       cfg.Consumer,
		Description:   "idem: loads partitions",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		MaxAckPending: cfg.MaxAckPending,
		FilterSubject: cfg.SubjectPrefix + ".>",
	}}, {cfg.Stream, jetstream.ConsumerConfig{
		Durable:       cfg.BackfillName(),
		Description:   "idem: loads partitions of backfills, after live ones",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		MaxAckPending: cfg.MaxAckPending,
		FilterSubject: cfg.BackfillSubjectPrefix() + ".>",
	}}, {cfg.AdvisoryStream, jetstream.ConsumerConfig{
		Durable:        cfg.ReconcilerName(),
		Description:    "idem: dead-letters messages that exhausted their deliveries without a verdict",
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        reconcilerAckWait,
		MaxDeliver:     -1, // a failed dead letter is retried until it succeeds
		FilterSubjects: cfg.advisorySubjects(),
	}}}
}

// lookupConsumer returns the server's config of c, or nil when c does not
// exist.
func lookupConsumer(ctx context.Context, js jetstream.JetStream, c consumerSpec) (*jetstream.ConsumerConfig, error) {
	cons, err := js.Consumer(ctx, c.stream, c.config.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: look up consumer %s on stream %s: %w", c.config.Durable, c.stream, err)
	}
	have := cons.CachedInfo().Config
	return &have, nil
}

// diff lists the settings idem sets in which have differs from c. The
// reconciler's MaxAckPending is the server's default, so it is compared
// only when c sets it.
func (c consumerSpec) diff(have jetstream.ConsumerConfig) []Drift {
	want := c.config
	var out []Drift
	add := func(field, server, config string) {
		if server != config {
			out = append(out, Drift{Stream: c.stream, Consumer: want.Durable, Field: field, Server: server, Config: config})
		}
	}
	add("ack_policy", jsonName(have.AckPolicy), jsonName(want.AckPolicy))
	add("deliver_policy", jsonName(have.DeliverPolicy), jsonName(want.DeliverPolicy))
	add("ack_wait", have.AckWait.String(), want.AckWait.String())
	add("max_deliver", strconv.Itoa(have.MaxDeliver), strconv.Itoa(want.MaxDeliver))
	if want.MaxAckPending != 0 {
		add("max_ack_pending", strconv.Itoa(have.MaxAckPending), strconv.Itoa(want.MaxAckPending))
	}
	add("filter_subject", filterSubjects(have), filterSubjects(want))
	return out
}

// applyTo returns have with the settings diff compares set to c's.
func (c consumerSpec) applyTo(have jetstream.ConsumerConfig) jetstream.ConsumerConfig {
	want := c.config
	have.AckWait = want.AckWait
	have.MaxDeliver = want.MaxDeliver
	if want.MaxAckPending != 0 {
		have.MaxAckPending = want.MaxAckPending
	}
	have.FilterSubject, have.FilterSubjects = want.FilterSubject, want.FilterSubjects
	return have
}

// filterSubjects renders a consumer's filter, whether set as FilterSubject
// or FilterSubjects.
func filterSubjects(c jetstream.ConsumerConfig) string {
	fs := c.FilterSubjects
	if c.FilterSubject != "" {
		fs = append([]string{c.FilterSubject}, fs...)
	}
	if len(fs) == 0 {
		return "(none)"
	}
	return strings.Join(fs, ",")
}

// jsonName is a policy as the server's JSON and the nats CLI write it.
func jsonName(v json.Marshaler) string {
	b, err := v.MarshalJSON()
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.Trim(string(b), `"`)
}

// ensureStream creates want, or checks an existing stream of that name: its
// retention and storage must be want's, and it gains want's missing subjects.
// Everything else the operator set (limits, replicas, duplicate window) stays.
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, raiseWindow bool) error {
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
	var changes []string
	var missing []string
	for _, w := range want.Subjects {
		if !slices.ContainsFunc(have.Subjects, func(h string) bool { return subjectCovers(h, w) }) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		have.Subjects = append(have.Subjects, missing...)
		changes = append(changes, "add subjects "+strings.Join(missing, ", ")+" to")
	}
	if window := raisedWindow(have, want); raiseWindow && window > have.Duplicates {
		changes = append(changes, fmt.Sprintf("raise the duplicate window from %s to %s of", have.Duplicates, window))
		have.Duplicates = window
	}
	if len(changes) == 0 {
		return nil
	}
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return fmt.Errorf("consumer: %s stream %s: %w", strings.Join(changes, " and "), want.Name, err)
	}
	return nil
}

// raisedWindow is the duplicate window idem wants on have, within what
// JetStream allows: no longer than the stream's max age, when it has one.
func raisedWindow(have, want jetstream.StreamConfig) time.Duration {
	if have.MaxAge > 0 {
		return min(want.Duplicates, have.MaxAge)
	}
	return want.Duplicates
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
