package service

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/schemas"
)

// consumerConfig is the consumer's side of the config.
func consumerConfig(cfg *config.Config, log zerolog.Logger, hooks consumer.Hooks) consumer.Config {
	ds := make(map[string]consumer.Dataset, len(cfg.Datasets))
	for name, d := range cfg.Datasets {
		ds[name] = consumer.Dataset{
			PartitionType:  d.PartitionType,
			MaxConcurrency: d.MaxConcurrency,
			Retry: consumer.Retry{
				MaxAttempts: d.MaxAttempts(),
				Delay:       d.RetryDelay.Std(),
				MaxDelay:    d.MaxRetryDelay.Std(),
			},
		}
	}
	return consumer.Config{
		Stream:           cfg.NATS.Stream,
		DLQStream:        cfg.NATS.DLQStream,
		Consumer:         cfg.NATS.Consumer,
		SubjectPrefix:    cfg.NATS.SubjectPrefix,
		DLQSubjectPrefix: cfg.NATS.DLQSubjectPrefix,
		AckWait:          cfg.NATS.AckWait.Std(),
		MaxInFlight:      cfg.NATS.MaxInFlight,
		BackfillShare:    cfg.NATS.BackfillShare,
		MaxGroup:         cfg.NATS.MaxGroup,
		Replicas:         cfg.NATS.Replicas,
		Datasets:         ds,
		Log:              log,
		Hooks:            hooks,
	}
}

// StreamsConfig is what consumer.EnsureStreams and consumer.ApplyStreams get
// for cfg: the server side of the consumer's config and the duplicate window.
func StreamsConfig(cfg *config.Config) consumer.StreamsConfig {
	return streamsConfig(cfg, consumerConfig(cfg, zerolog.Nop(), consumer.Hooks{}))
}

func streamsConfig(cfg *config.Config, ccfg consumer.Config) consumer.StreamsConfig {
	sc := ccfg.Streams()
	sc.Duplicates = cfg.NATS.DuplicateWindow()
	sc.DeadLetterDuplicates = cfg.NATS.DeadLetterWindow()
	r := cfg.NATS.Results
	sc.ResultsStream, sc.ResultsSubjectPrefix = r.Stream, r.SubjectPrefix
	sc.ResultsMaxAge, sc.ResultsMaxBytes = r.MaxAge.Std(), r.MaxBytes
	return sc
}

// ensureStreams is serve's start: it creates what is missing and warns about
// each consumer setting that differs from the config, changing none.
func ensureStreams(ctx context.Context, js jetstream.JetStream, sc consumer.StreamsConfig, log zerolog.Logger) error {
	if err := consumer.EnsureStreams(ctx, js, sc); err != nil {
		return err
	}
	drifts, err := consumer.ConsumerDrift(ctx, js, sc)
	if err != nil {
		return err
	}
	for _, d := range drifts {
		log.Warn().Str("stream", d.Stream).Str("consumer", d.Consumer).Str("field", d.Field).
			Str("server", d.Server).Str("config", d.Config).
			Msg("consumer settings differ from the config; run `idem streams` to apply")
	}
	return nil
}

// ensureStreamsWaiting is ensureStreams, waiting while JetStream cannot
// answer yet: a cluster that lost its quorum or is electing its meta leader
// (servers replaced, a rolling restart) answers 503 "temporarily
// unavailable", or, for its first seconds, not at all. Exiting then would
// hand the restart to a supervisor's growing delay; JetStream not enabled
// at all, and a subject idem may not publish to, are still errors.
func ensureStreamsWaiting(ctx context.Context, js jetstream.JetStream, sc consumer.StreamsConfig, log zerolog.Logger) error {
	_, err := waitUntil(ctx, log, "jetstream", func() (struct{}, error) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return struct{}{}, ensureStreams(actx, js, sc, log)
	}, func(err error) bool { return jetStreamNotReady(err, js.Conn().LastError()) })
	return err
}

// jsErrCodeNoSuitablePeers is the server's "no suitable peers for
// placement" (JSClusterNoPeersErrF).
const jsErrCodeNoSuitablePeers = 10005

// jetStreamNotReady reports an answer worth waiting out at start: a 503
// other than "JetStream not enabled", no suitable peers because peers are
// offline, or no answer at all unless the
// connection's last error (connErr) is a permissions violation: a request
// to a subject the user may not publish to also goes unanswered, and must
// fail the start.
func jetStreamNotReady(err, connErr error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		if api.ErrorCode == jsErrCodeNoSuitablePeers {
			// The servers a replicated stream needs are down (a rolling
			// restart); other reasons (too few servers, tags) stand.
			return strings.Contains(api.Description, "peer offline")
		}
		return api.Code == 503 &&
			api.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabled && api.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabledForAccount
	}
	unanswered := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
	return unanswered && !errors.Is(connErr, nats.ErrPermissionViolation)
}

// meta is what the handler gets of msg's delivery.
func meta(msg *consumer.Message) handlers.Meta {
	return handlers.Meta{StreamSeq: msg.StreamSeq, MaxAttempts: msg.MaxAttempts,
		Stream: msg.Stream, MsgID: msg.Headers.Get(nats.MsgIdHdr), Published: msg.Published, Trace: msg.Span}
}

// eventsOf is what the handler gets of msgs.
func eventsOf(msgs []*consumer.Message) ([]schemas.Event, []handlers.Meta) {
	evs := make([]schemas.Event, len(msgs))
	ms := make([]handlers.Meta, len(msgs))
	for i, msg := range msgs {
		evs[i], ms[i] = msg.Event, meta(msg)
	}
	return evs, ms
}

// groupFunc is the consumer's group handler: several events of one
// dataset, one group load (handlers.HandleGroup), each event's metrics.
func groupFunc(h *handlers.Handler, m *metrics.Metrics) consumer.GroupHandler {
	return func(ctx context.Context, msgs []*consumer.Message) []error {
		start := time.Now()
		evs, ms := eventsOf(msgs)
		outs, errs := h.HandleGroup(ctx, evs, ms)
		took := time.Since(start)
		for i, msg := range msgs {
			crashHook("after_commit", msg.Event.RunID)
			status := outs[i].Status
			if errs[i] != nil {
				status = "failed"
			}
			m.Load(msg.Dataset, status, took, outs[i].Rows.Inserted+outs[i].Rows.Updated)
			for _, c := range outs[i].Checks {
				m.Checks.WithLabelValues(msg.Dataset, c.Name, c.Status).Inc()
			}
			for _, c := range outs[i].SchemaChanges {
				m.SchemaChanges.WithLabelValues(msg.Dataset, c.Change, c.Action).Inc()
			}
		}
		return errs
	}
}

// dupFunc answers the consumer's waiting messages that are runs already
// done (handlers.SkipDone), each skip counted as a load's would be.
func dupFunc(h *handlers.Handler, m *metrics.Metrics) consumer.Duplicates {
	return func(ctx context.Context, msgs []*consumer.Message) []int {
		start := time.Now()
		evs, ms := eventsOf(msgs)
		skips := h.SkipDone(ctx, evs, ms)
		took := time.Since(start)
		for i, n := range skips {
			if n > 0 {
				crashHook("after_commit", msgs[i].Event.RunID)
				m.Load(msgs[i].Dataset, audit.StatusSkipped, took, 0)
			}
		}
		return skips
	}
}

// loadFunc is the consumer's handler: one event, one load, its metrics.
func loadFunc(h *handlers.Handler, m *metrics.Metrics) consumer.Handler {
	return func(ctx context.Context, msg *consumer.Message) error {
		start := time.Now()
		out, err := h.Handle(ctx, msg.Event, meta(msg))
		crashHook("after_commit", msg.Event.RunID)
		status := out.Status
		if err != nil {
			status = "failed"
		}
		m.Load(msg.Dataset, status, time.Since(start), out.Rows.Inserted+out.Rows.Updated)
		for _, c := range out.Checks {
			m.Checks.WithLabelValues(msg.Dataset, c.Name, c.Status).Inc()
		}
		for _, c := range out.SchemaChanges {
			m.SchemaChanges.WithLabelValues(msg.Dataset, c.Change, c.Action).Inc()
		}
		return err
	}
}
