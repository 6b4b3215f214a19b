package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/defaults"
	"github.com/idem-data/idem/schemas"
)

// Defaults applied by WithDefaults to fields left zero.
const (
	// DefaultMaxAttempts is a dataset's budget of loads that run: one attempt
	// and three retries.
	DefaultMaxAttempts = defaults.MaxAttempts
	// DefaultMaxDeliver is JetStream's MaxDeliver on the durable consumer: a
	// loose backstop, not the retry budget (that counts loads that ran, in
	// the audit table). Deliveries that run nothing still count for
	// JetStream: a nak at shutdown, a deferral for want of a dataset turn.
	// A message that reaches it is dead-lettered as crashed by the
	// Reconciler.
	DefaultMaxDeliver = 1000
	// DefaultProbeDelay is the first delay between warehouse probes while
	// the circuit is open; it doubles up to DefaultMaxProbeDelay.
	DefaultProbeDelay    = time.Second
	DefaultMaxProbeDelay = 30 * time.Second
	// DefaultRetryDelay is the first backoff delay after a transient failure.
	DefaultRetryDelay = defaults.RetryDelay
	// DefaultMaxRetryDelay caps the exponential backoff.
	DefaultMaxRetryDelay = defaults.MaxRetryDelay
	// DefaultFetchWait is how long one pull request waits for messages. A
	// pull asks for as many messages as there are free slots then; slots
	// freed while it is open wait for the next pull.
	DefaultFetchWait = 2 * time.Second
	// DefaultShutdownGrace is how long in-flight handlers may run after a stop
	// before their context is cancelled with ErrShutdown.
	DefaultShutdownGrace = 25 * time.Second
	// DefaultShutdownNakDelay is the redelivery delay of a message interrupted
	// by a stop: short, so another replica picks it up soon.
	DefaultShutdownNakDelay = time.Second
	// DefaultAckTimeout bounds one exchange with the server that must be
	// confirmed: the DoubleAck of a success and the PubAck of a dead letter.
	DefaultAckTimeout = 10 * time.Second
)

// Retry is a dataset's retry budget and backoff.
type Retry struct {
	// MaxAttempts is how many loads of a message may run (retries+1), as the
	// handler counts them (see Input.Attempt). The attempt that reaches it
	// is the last: a transient failure there is dead-lettered as exhausted.
	// Default DefaultMaxAttempts.
	MaxAttempts int
	// Delay is the first backoff delay. Default DefaultRetryDelay.
	Delay time.Duration
	// MaxDelay caps the backoff. Default DefaultMaxRetryDelay.
	MaxDelay time.Duration
}

// Dataset is what the consumer needs to know of one configured dataset.
// Datasets are keyed by name in Config.Datasets.
type Dataset struct {
	// PartitionType is how the event's partition is parsed; "" is date.
	PartitionType schemas.PartitionType
	// MaxConcurrency bounds this dataset's handlers running at once in this
	// process; 0 means only Config.MaxInFlight applies.
	MaxConcurrency int
	// Retry is the delivery budget and backoff.
	Retry Retry
}

// Config configures a Consumer and a Reconciler. Names and prefixes have no
// defaults here: internal/service passes the values of internal/config,
// which has them.
type Config struct {
	// Stream is the events stream, e.g. IDEM_EVENTS. Required.
	Stream string
	// DLQStream is the dead-letter stream, e.g. IDEM_DLQ. Required: dead
	// letters are published expecting it, so a misrouted subject fails
	// loudly instead of landing in some other stream.
	DLQStream string
	// AdvisoryStream captures the max-deliveries advisories of Consumer for
	// the Reconciler. Default Stream+"_ADVISORIES".
	AdvisoryStream string
	// Consumer is the durable pull consumer on Stream, e.g. idem. Required.
	Consumer string
	// SubjectPrefix prefixes event subjects: <prefix>.<dataset>. Required.
	SubjectPrefix string
	// DLQSubjectPrefix prefixes dead letters: <prefix>.<dataset> or
	// <prefix>._invalid. Required.
	DLQSubjectPrefix string
	// AckWait is the consumer's ack wait; heartbeats are sent every AckWait/3.
	// Required.
	AckWait time.Duration
	// MaxInFlight bounds the loads this process runs at once. It holds up
	// to twice as many messages: the others were fetched ahead, or wait for
	// their dataset's turn, with their heartbeats going. Required.
	MaxInFlight int
	// BackfillShare is the percent of MaxInFlight the backfill lane keeps
	// while live work is held: 1 to 100. Without live work the backfill
	// uses every load. Default DefaultBackfillShare.
	BackfillShare int
	// Replicas of the streams EnsureStreams creates; default 1.
	Replicas int
	// MaxDeliver is the durable consumer's MaxDeliver, a backstop above
	// every dataset's MaxAttempts. Default DefaultMaxDeliver.
	MaxDeliver int
	// Probe tells whether the warehouse can take loads again while the
	// circuit is open: nil when it can. Nil Probe: the circuit lets one load
	// through after each delay instead.
	Probe func(ctx context.Context) error
	// Fleet, when set, enables the fleet: replicas say in a key-value bucket
	// which datasets they know, and an event for a dataset this replica
	// does not know is left for a live replica that does, or waits
	// Fleet.Grace for one (a config rolling out) before it is
	// dead-lettered as fatal. Without it such an event is fatal at once.
	Fleet *FleetConfig
	// Paused, when set, tells whether a dataset is paused now, and until
	// when (zero: until resumed): its messages are held without a load
	// slot, or sent back with PauseDelay (pause.go). It is asked often and
	// must be quick (internal/service answers from memory).
	Paused func(dataset string) (until time.Time, paused bool)
	// ProbeDelay is the first delay between probes, doubling up to
	// MaxProbeDelay. Defaults DefaultProbeDelay and DefaultMaxProbeDelay.
	ProbeDelay    time.Duration
	MaxProbeDelay time.Duration
	// Datasets are the configured datasets by name. An event for any other
	// dataset is invalid and dead-lettered to <DLQSubjectPrefix>._invalid.
	Datasets map[string]Dataset

	// FetchWait is how long one pull request waits on average: each waits
	// between a half and one and a half of it, so that replicas' requests
	// never keep step. Default DefaultFetchWait.
	FetchWait time.Duration
	// ShutdownGrace is how long in-flight handlers may finish after a stop
	// caused by Run's context. Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// ShutdownNakDelay is the redelivery delay after a stop interrupted a
	// message. Default DefaultShutdownNakDelay.
	ShutdownNakDelay time.Duration
	// AckTimeout bounds a DoubleAck or a dead letter's PubAck. Default
	// DefaultAckTimeout.
	AckTimeout time.Duration

	// Log receives every line; each line about a message carries dataset,
	// partition, run_id, attempt and stream_seq. The zero Logger discards
	// everything.
	Log zerolog.Logger
	// Hooks receive metric events; nil hooks are skipped.
	Hooks Hooks
	// DeadLettered, when set, is called once JetStream has stored a dead
	// letter (or already held it: a redelivery dead-lettered again), before
	// the message is terminated, with the letter, the loads the handler
	// counted (0: unknown) and the dead letter's PubAck. idem publishes the
	// event's result from it. Heartbeats keep the message meanwhile.
	DeadLettered func(ctx context.Context, dl deadletter.Envelope, attempt int, ack *jetstream.PubAck)
	// GroupHandler, with GroupSize, loads several fetched messages of one
	// dataset at once (see GroupHandler); MaxGroup, the most GroupSize
	// returns, sizes how many messages are fetched ahead so groups can
	// form. A message's load in a group counts as one of MaxInFlight with
	// the others of its group: MaxInFlight bounds transactions.
	GroupHandler GroupHandler
	GroupSize    func(m *Message) int
	MaxGroup     int
	// Duplicates, when set, is asked in batches about the live messages
	// that wait for a load slot: one it finds done (its skip recorded) is
	// acknowledged at once and never takes a slot (see Duplicates).
	Duplicates Duplicates
	// Tracer makes each delivery's spans (receive, process, settle; see
	// package tracing); nil makes none, and a trace context that arrived
	// on a message still reaches the handler and the dead letter.
	Tracer trace.Tracer
	// Rand draws the backoff jitter, uniform in [0,1); it must be safe for
	// concurrent use. Default math/rand/v2.Float64.
	Rand func() float64
	// Now stamps Idem-Failed-At. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with every zero field that has a default filled.
func (c Config) WithDefaults() Config {
	if c.AdvisoryStream == "" && c.Stream != "" {
		c.AdvisoryStream = c.Stream + "_ADVISORIES"
	}
	setDuration(&c.FetchWait, DefaultFetchWait)
	setDuration(&c.ShutdownGrace, DefaultShutdownGrace)
	setDuration(&c.ShutdownNakDelay, DefaultShutdownNakDelay)
	setDuration(&c.AckTimeout, DefaultAckTimeout)
	setDuration(&c.ProbeDelay, DefaultProbeDelay)
	setDuration(&c.MaxProbeDelay, DefaultMaxProbeDelay)
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.BackfillShare == 0 {
		c.BackfillShare = DefaultBackfillShare
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	ds := make(map[string]Dataset, len(c.Datasets))
	for name, d := range c.Datasets {
		if d.Retry.MaxAttempts == 0 {
			d.Retry.MaxAttempts = DefaultMaxAttempts
		}
		setDuration(&d.Retry.Delay, DefaultRetryDelay)
		setDuration(&d.Retry.MaxDelay, DefaultMaxRetryDelay)
		ds[name] = d
	}
	c.Datasets = ds
	return c
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

// Validate reports every problem of c (after WithDefaults), each naming the
// field and the fix.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("consumer: "+format, args...)) }
	for _, f := range []struct{ name, value, example string }{
		{"Stream", c.Stream, "IDEM_EVENTS"},
		{"DLQStream", c.DLQStream, "IDEM_DLQ"},
		{"AdvisoryStream", c.AdvisoryStream, "IDEM_EVENTS_ADVISORIES"},
		{"Consumer", c.Consumer, "idem"},
	} {
		if msg := nameProblem(f.value); msg != "" {
			add("%s %q %s; e.g. %s", f.name, f.value, msg, f.example)
		}
	}
	if c.Stream != "" && (c.Stream == c.DLQStream || c.Stream == c.AdvisoryStream || c.DLQStream == c.AdvisoryStream) {
		add("Stream %q, DLQStream %q and AdvisoryStream %q must be three different streams", c.Stream, c.DLQStream, c.AdvisoryStream)
	}
	for _, f := range []struct{ name, value, example string }{
		{"SubjectPrefix", c.SubjectPrefix, "idem.ready"},
		{"DLQSubjectPrefix", c.DLQSubjectPrefix, "idem.dlq"},
	} {
		if !validPrefix(f.value) {
			add("%s %q is not a subject prefix; write dot-separated tokens without wildcards or white space, e.g. %s", f.name, f.value, f.example)
		}
	}
	if validPrefix(c.SubjectPrefix) && validPrefix(c.DLQSubjectPrefix) && prefixesOverlap(c.SubjectPrefix, c.DLQSubjectPrefix) {
		add("SubjectPrefix %q and DLQSubjectPrefix %q overlap; dead letters would be consumed as events", c.SubjectPrefix, c.DLQSubjectPrefix)
	}
	if c.AckWait <= 0 {
		add("AckWait %s must be positive, e.g. 30s", c.AckWait)
	}
	if c.MaxInFlight < 1 {
		add("MaxInFlight %d must be at least 1", c.MaxInFlight)
	}
	if c.BackfillShare < 1 || c.BackfillShare > 100 {
		add("BackfillShare %d must be a percent from 1 to 100, e.g. %d", c.BackfillShare, DefaultBackfillShare)
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"FetchWait", c.FetchWait}, {"ShutdownGrace", c.ShutdownGrace}, {"ShutdownNakDelay", c.ShutdownNakDelay}, {"AckTimeout", c.AckTimeout},
		{"ProbeDelay", c.ProbeDelay}, {"MaxProbeDelay", c.MaxProbeDelay}} {
		if d.value < 0 {
			add("%s %s must not be negative", d.name, d.value)
		}
	}
	for _, name := range sortedKeys(c.Datasets) {
		d := c.Datasets[name]
		if !schemas.ValidDataset(name) {
			add("dataset %q is not a valid dataset name (^[a-z][a-z0-9_]{0,62}$)", name)
		}
		if d.Retry.MaxAttempts < 1 {
			add("dataset %s: Retry.MaxAttempts %d must be at least 1", name, d.Retry.MaxAttempts)
		}
		if d.Retry.Delay < 0 || d.Retry.MaxDelay < d.Retry.Delay {
			add("dataset %s: Retry.Delay %s and Retry.MaxDelay %s must satisfy 0 <= Delay <= MaxDelay", name, d.Retry.Delay, d.Retry.MaxDelay)
		}
		if d.MaxConcurrency < 0 {
			add("dataset %s: MaxConcurrency %d must be 0 (no limit) or more", name, d.MaxConcurrency)
		}
		if d.Retry.MaxAttempts > c.MaxDeliver && c.MaxDeliver > 0 {
			add("dataset %s: Retry.MaxAttempts %d is above MaxDeliver %d, JetStream's backstop; raise MaxDeliver", name, d.Retry.MaxAttempts, c.MaxDeliver)
		}
	}
	return errors.Join(errs...)
}

// Streams is the server side of c: what EnsureStreams creates. MaxDeliver
// is the backstop (Config.MaxDeliver), never a dataset's budget.
func (c Config) Streams() StreamsConfig {
	c = c.WithDefaults()
	return StreamsConfig{
		Stream:           c.Stream,
		SubjectPrefix:    c.SubjectPrefix,
		DLQStream:        c.DLQStream,
		DLQSubjectPrefix: c.DLQSubjectPrefix,
		AdvisoryStream:   c.AdvisoryStream,
		Consumer:         c.Consumer,
		AckWait:          c.AckWait,
		MaxDeliver:       c.MaxDeliver,
		MaxAckPending:    max(DefaultMaxAckPending, c.MaxInFlight),
		Replicas:         c.Replicas,
	}
}

// backfillConsumer is the durable consumer of the backfill lane.
func (c Config) backfillConsumer() string { return backfillName(c.Consumer) }

// lookup tells schemas.Decode the configured datasets' partition types.
func (c *Config) lookup(dataset string) (schemas.PartitionType, bool) {
	d, ok := c.Datasets[dataset]
	return d.PartitionType, ok
}

// nameProblem checks a stream or consumer name against what NATS accepts.
func nameProblem(name string) string {
	if name == "" {
		return "is required"
	}
	if strings.ContainsAny(name, ".*>/\\") || strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return `contains white space, ".", "*", ">", "/" or "\"`
	}
	return ""
}

func validPrefix(p string) bool {
	if p == "" {
		return false
	}
	for _, tok := range strings.Split(p, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, "*> \t\r\n") {
			return false
		}
	}
	return true
}

func prefixesOverlap(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".")
}
