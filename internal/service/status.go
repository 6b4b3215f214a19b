package service

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/backfill"
	"github.com/idem-data/idem/internal/clock"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/internal/observer"
	"github.com/idem-data/idem/internal/reverify"
	"github.com/idem-data/idem/internal/statuspage"
	"github.com/idem-data/idem/internal/tracing"
	"github.com/idem-data/idem/internal/why"
	"github.com/idem-data/idem/schemas"
)

// dlqListTTL: the page lists the dead-letter stream at most this often;
// dlqListNewest bounds each listing to the newest dead letters.
const (
	dlqListTTL    = 5 * time.Second
	dlqListNewest = 2000
)

// A reload's event: its PubAck is awaited this long, as idem publish's;
// who asked and why travel in these attributes, recorded with the attempt.
const (
	reloadPubAckTimeout   = 10 * time.Second
	reloadByAttribute     = "idem.requested_by"
	reloadReasonAttribute = "idem.reason"
)

// status assembles the observer and the status page over the running
// service's parts. cfg follows reloads.
type status struct {
	cfg     *atomic.Pointer[config.Config]
	pool    *pgxpool.Pool
	nc      *nats.Conn
	js      jetstream.JetStream
	c       *consumer.Consumer
	version *atomic.Pointer[string]
	log     zerolog.Logger
	obs     *observer.Observer
	rv      *reverify.Reverifier // nil when off
	h       *handlers.Handler    // restores and retracts a partition
	route   Route

	site *clock.Site

	mu       sync.Mutex
	dlqAt    time.Time
	dlq      []statuspage.DeadLetter
	dlqErr   error
	dlqStore *deadletter.Store
}

func newStatus(cfg *atomic.Pointer[config.Config], pool *pgxpool.Pool, nc *nats.Conn, js jetstream.JetStream, c *consumer.Consumer,
	version *atomic.Pointer[string], m *metrics.Metrics, site *clock.Site, log zerolog.Logger) *status {
	s := &status{cfg: cfg, pool: pool, nc: nc, js: js, c: c, version: version, site: site, log: log}
	cur := cfg.Load()
	s.obs = observer.New(observer.Config{
		JS: js, Stream: cur.NATS.Stream, Consumer: cur.NATS.Consumer, DLQStream: cur.NATS.DLQStream,
		BackfillConsumer: StreamsConfig(cur).BackfillName(),
		DLQSubjectPrefix: cur.NATS.DLQSubjectPrefix, DB: pool, Pipeline: cur.Pipeline,
		Calendars: s.calendars, Datasets: func() []string { return s.cfg.Load().DatasetNames() }, Replicas: s.replicas, Ready: func(ctx context.Context) bool { return len(readiness(ctx, nc, c, pool)) == 0 },
		Metrics: m, Log: log, Now: site.Now,
	})
	return s
}

func (s *status) calendars() []observer.Calendar {
	cfg := s.cfg.Load()
	var out []observer.Calendar
	for _, name := range cfg.DatasetNames() {
		if e, ok := cfg.Datasets[name].Calendar(); ok {
			out = append(out, observer.Calendar{Dataset: name, Expect: e})
		}
	}
	return out
}

func (s *status) replicas(ctx context.Context) ([]observer.Replica, error) {
	ms, err := s.c.Fleet(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]observer.Replica, 0, len(ms))
	for _, m := range ms {
		out = append(out, observer.Replica{Name: m.Replica, Version: m.Version})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// page builds the status page.
func (s *status) page() (*statuspage.Page, error) {
	cfg := s.cfg.Load()
	return statuspage.New(statuspage.Deps{
		Pipeline: cfg.Pipeline, DB: s.pool, Token: cfg.HTTP.Token, TokenForReads: cfg.HTTP.TokenForReads, Log: s.log,
		Datasets:    s.datasets,
		Health:      s.health,
		DeadLetters: s.deadLetters,
		Replay:      s.replay,
		Backfill:    s.backfill,
		Reload:      s.reload,
		Versions:    s.versions,
		Why:         s.why,
		Now:         s.site.Now,
	})
}

// why tells a partition's story, as `idem audit why` does.
func (s *status) why(ctx context.Context, dataset, partition string) (why.Report, error) {
	cfg := s.cfg.Load()
	src := why.Sources{Pipeline: cfg.Pipeline, DB: s.pool, Audit: s.pool}
	var natsErr error
	s.mu.Lock()
	dlq, err := s.store(ctx)
	s.mu.Unlock()
	if err == nil {
		var ev jetstream.Stream
		if ev, err = s.js.Stream(ctx, cfg.NATS.Stream); err == nil {
			src.Streams = why.JetStream{Events: ev, DLQ: dlq}
		}
	}
	natsErr = err
	r, err := why.Tell(ctx, src, why.DatasetOf(cfg, dataset), partition)
	if err != nil {
		return r, err
	}
	if natsErr != nil {
		r.Notes = append([]string{"NATS could not be read: " + natsErr.Error()}, r.Notes...)
	}
	return r, nil
}

func (s *status) datasets() []statuspage.Dataset {
	cfg := s.cfg.Load()
	out := make([]statuspage.Dataset, 0, len(cfg.Datasets))
	for _, name := range cfg.DatasetNames() {
		d := statuspage.Dataset{Name: name, Upstreams: cfg.Upstreams(name), Definition: cfg.Datasets[name].DefinitionHash()}
		d.PartitionType, _ = cfg.Lookup(name)
		if e, ok := cfg.Datasets[name].Calendar(); ok {
			d.Calendar = &e
		}
		if w, ok := cfg.Datasets[name].RecheckWindow(); ok {
			d.Recheck = &w
		}
		out = append(out, d)
	}
	return out
}

func (s *status) health(ctx context.Context) statuspage.Health {
	up, state, reason, since := s.c.Warehouse()
	h := statuspage.Health{WarehouseUp: up, NATS: s.nc.Status().String(), ConfigVersion: *s.version.Load(), Postgres: s.route.String()}
	if !up {
		h.WarehouseReason = fmt.Sprintf("circuit %s for %s: %v", state, time.Since(since).Round(time.Second), reason)
	}
	if s.rv != nil {
		if last := s.rv.Last(); !last.Started.IsZero() {
			h.Reverified = fmt.Sprintf("re-verified %s ago: %d of %d recent events loaded again", time.Since(last.Started).Round(time.Second),
				last.Reloaded, last.Checked)
			if last.Err != nil {
				h.Reverified = fmt.Sprintf("re-verification %s ago did not finish: %v", time.Since(last.Started).Round(time.Second), last.Err)
			}
		}
	}
	r := s.obs.Last()
	h.Pending, h.AckPending = r.Pending, r.AckPending
	// The fleet bucket is read now (the consumer caches it briefly): a
	// replica that just started is listed at once.
	reps, err := s.replicas(ctx)
	if err != nil {
		reps = r.Replicas
	}
	for _, rep := range reps {
		h.Replicas = append(h.Replicas, statuspage.Replica{Name: rep.Name, Version: rep.Version})
	}
	return h
}

func (s *status) store(ctx context.Context) (*deadletter.Store, error) {
	if s.dlqStore != nil {
		return s.dlqStore, nil
	}
	cfg := s.cfg.Load()
	st, err := deadletter.Open(ctx, s.js, deadletter.Config{Stream: cfg.NATS.DLQStream, SubjectPrefix: cfg.NATS.DLQSubjectPrefix, EventsStream: cfg.NATS.Stream})
	if err != nil {
		return nil, err
	}
	s.dlqStore = st
	return st, nil
}

// deadLetters lists the dead-letter stream, cached for dlqListTTL.
func (s *status) deadLetters(ctx context.Context) ([]statuspage.DeadLetter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.dlqAt) < dlqListTTL {
		return s.dlq, s.dlqErr
	}
	s.dlq, s.dlqErr = nil, nil
	st, err := s.store(ctx)
	if err == nil {
		var ls []deadletter.Letter
		if ls, err = st.List(ctx, deadletter.Filter{Newest: dlqListNewest}, false); err == nil {
			for _, l := range ls {
				s.dlq = append(s.dlq, statuspage.DeadLetter{Seq: l.Seq, Time: l.StoredAt, Dataset: l.Dataset, Partition: l.Partition,
					RunID: l.RunID, Kind: string(l.Kind), Reason: l.Error, Subject: l.OriginalSubject})
			}
		}
	}
	s.dlqAt, s.dlqErr = time.Now(), err
	return s.dlq, err
}

// replay republishes one dead letter exactly as `idem dlq replay SEQ` does.
func (s *status) replay(ctx context.Context, seq uint64) (string, error) {
	s.mu.Lock()
	st, err := s.store(ctx)
	s.dlqAt = time.Time{} // the next listing reads the stream again
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	l, err := st.Get(ctx, seq)
	if err != nil {
		return "", err
	}
	r := st.Replay(ctx, l, deadletter.ReplayOptions{})
	if r.Action != deadletter.ActionReplayed {
		return "", fmt.Errorf("seq %d not replayed (%s): %s", seq, r.Action, r.Reason)
	}
	return fmt.Sprintf("seq %d (%s %s run %s) republished to %s as %s seq %d", seq, r.Dataset, r.Partition, r.RunID, r.Subject, r.Stream, r.StreamSeq), nil
}

// backfill publishes the missing and failed partitions of a range, as
// `idem backfill DATASET --from --to` does.
func (s *status) backfill(ctx context.Context, dataset, from, to string) (string, error) {
	cfg := s.cfg.Load()
	d, ok := cfg.Datasets[dataset]
	if !ok {
		return "", fmt.Errorf("dataset %q is not configured", dataset)
	}
	step, ok := backfill.StepOf(d.PartitionType)
	if !ok {
		return "", fmt.Errorf("dataset %s has %s partitions, which cannot be enumerated", dataset, d.PartitionType)
	}
	f, err := schemas.ParsePartition(d.PartitionType, from)
	if err != nil {
		return "", fmt.Errorf("from: %w", err)
	}
	t, err := schemas.ParsePartition(d.PartitionType, to)
	if err != nil {
		return "", fmt.Errorf("to: %w", err)
	}
	if t.Time.Before(f.Time) {
		return "", fmt.Errorf("to %s is before from %s", to, from)
	}
	keys, err := backfill.Keys(step, f.Time, t.Time)
	if err != nil {
		return "", err
	}
	res := &backfill.Result{Dataset: dataset, From: from, To: to, Step: string(step), RunID: backfill.NewRunID(time.Now()), Planned: len(keys)}
	rp := backfill.Reprocess{Missing: true, Failed: true}
	res.Reprocess = rp.String()
	if err := backfill.Plan(ctx, s.pool, cfg, res, keys, rp); err != nil {
		return "", err
	}
	if res.ToPublish == 0 {
		return fmt.Sprintf("%s %s..%s: nothing missing or failed among %d partition(s)", dataset, from, to, len(keys)), nil
	}
	if err := backfill.Publish(ctx, s.js, cfg, res, 0, nil); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s..%s: %d partition(s) published with run_id %s (%d duplicate)", dataset, from, to, res.Published, res.RunID, res.Duplicates), nil
}

// reloadRunID is the run id of a reload from the status page: unique and
// readable, as idem publish's manual__ and idem backfill's backfill__ are.
func reloadRunID(now time.Time) string {
	return "reload__" + now.UTC().Format("20060102T150405.000Z")
}

// reload publishes a forced event of one partition, as `idem publish
// DATASET PARTITION --force` does: the same subject, body and Nats-Msg-Id
// (schemas.NewMessage), a run id of its own, so that neither the ledger's
// earlier success nor JetStream's duplicate window drops it. It stays on
// the live lane: one partition someone is waiting for at the page, not a
// backfill to queue behind.
func (s *status) reload(ctx context.Context, dataset, partition, who, reason string) (string, error) {
	cfg := s.cfg.Load()
	if _, ok := cfg.Datasets[dataset]; !ok {
		return "", fmt.Errorf("dataset %q is not configured", dataset)
	}
	now := s.site.Now()
	ev := schemas.PartitionReady{Dataset: dataset, Partition: partition, RunID: reloadRunID(now), Force: true,
		Attributes: map[string]string{reloadByAttribute: who}}
	if reason != "" {
		ev.Attributes[reloadReasonAttribute] = reason
	}
	m, err := schemas.NewMessage(cfg.NATS.SubjectPrefix, ev, cfg.Lookup, now)
	if err != nil {
		return "", err
	}
	msg := &nats.Msg{Subject: m.Subject, Data: m.Body, Header: nats.Header{}}
	tracer := trace.SpanFromContext(ctx).TracerProvider().Tracer("github.com/idem-data/idem/internal/service")
	ctx, span := tracing.StartPublish(ctx, tracer, tracing.Message{Subject: m.Subject, Header: msg.Header, MsgID: m.MsgID, BodySize: len(m.Body)})
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, reloadPubAckTimeout)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.MsgID), jetstream.WithExpectStream(cfg.NATS.Stream))
	if err != nil {
		return "", fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	return fmt.Sprintf("%s %s published with run_id %s (forced) as %s seq %d", dataset, m.Event.Partition, ev.RunID, ack.Stream, ack.Sequence), nil
}

// versions restores (restore) or retracts a partition for the status
// page, as `idem restore` and `idem retract` do; the handler records the
// action.
func (s *status) versions(ctx context.Context, restore bool, r statuspage.VersionRequest) (int64, string, error) {
	req := handlers.OperatorRequest{Dataset: r.Dataset, Partition: r.Partition, ToRun: r.ToRun, Reason: r.Reason, By: r.Who, RemoteAddr: r.RemoteAddr}
	do := s.h.Retract
	if restore {
		do = s.h.Restore
	}
	res, err := do(ctx, req)
	if err != nil {
		return res.ActionID, "", err
	}
	if v := res.Restored.Version; v.ID != 0 {
		return res.ActionID, fmt.Sprintf("restored to the rows of run %s: %d rows deleted, %d inserted; now run %s",
			v.RunID, res.Restored.Deleted, res.Restored.Inserted, res.RunID), nil
	}
	return res.ActionID, fmt.Sprintf("retracted: %d rows deleted; run %s", res.Deleted, res.RunID), nil
}
