// Package observer owns the figures idem reads on a clock rather than per
// event: the durable consumer's backlog, the dead letters waiting in their
// stream (per dataset), each calendar's missing and late partitions and its
// freshness, and the live replicas. It sets the matching gauges and keeps the
// last reading for the status page's health strip. Every replica reads the
// same shared figures; dashboards aggregate them with max.
package observer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/metrics"
)

// DefaultInterval is how often the figures are read.
const DefaultInterval = 15 * time.Second

// Calendar is one dataset's calendar.
type Calendar struct {
	Dataset string
	Expect  calendar.Expect
}

// Replica is a live idem process.
type Replica struct{ Name, Version string }

// Config says where to read and what to set.
type Config struct {
	JS                          jetstream.JetStream
	Stream, Consumer, DLQStream string
	// BackfillConsumer is the backfill lane's durable; "" reads none.
	BackfillConsumer string
	DLQSubjectPrefix string
	DB               audit.Querier
	Pipeline         string
	// Calendars lists the datasets with a calendar (it follows reloads).
	Calendars func() []Calendar
	// Datasets lists the configured datasets (it follows reloads): each
	// has an idem_dead_letters_pending series, 0 when the stream holds none
	// of its dead letters, so a dashboard shows 0 rather than no data.
	Datasets func() []string
	// Replicas lists the live replicas; nil when unknown.
	Replicas func(ctx context.Context) ([]Replica, error)
	// Ready says whether this process would answer /readyz with 200.
	Ready    func(ctx context.Context) bool
	Metrics  *metrics.Metrics
	Interval time.Duration
	Now      func() time.Time
	Log      zerolog.Logger
}

// Reading is one round of figures.
type Reading struct {
	At                  time.Time
	Pending, AckPending uint64
	// BackfillPending are the backfill lane's events not yet delivered.
	BackfillPending uint64
	DeadLetters     map[string]int // per dataset
	Replicas        []Replica
	Calendars       map[string]calendar.Summary
}

// Observer reads the figures every Interval.
type Observer struct {
	cfg  Config
	mu   sync.Mutex
	last Reading

	gmu   sync.Mutex
	shown map[*prometheus.GaugeVec]map[string]bool // the labels each vector was last given
}

// New fills the defaults.
func New(cfg Config) *Observer {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Observer{cfg: cfg}
}

// Last is the newest reading.
func (o *Observer) Last() Reading {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// Run reads at once, then every Interval, until ctx ends.
func (o *Observer) Run(ctx context.Context) {
	t := time.NewTicker(o.cfg.Interval)
	defer t.Stop()
	for {
		o.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh reads every figure once and sets the gauges. A figure that cannot
// be read keeps its previous value; the failure is logged at debug level
// (the warehouse circuit and /readyz already speak of outages).
func (o *Observer) Refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Interval)
	defer cancel()
	r := o.Last()
	r.At = o.cfg.Now()
	m := o.cfg.Metrics
	if o.cfg.Ready != nil && m != nil {
		if o.cfg.Ready(ctx) {
			m.Ready.Set(1)
		} else {
			m.Ready.Set(0)
		}
	}
	if err := o.consumer(ctx, &r); err != nil {
		o.debug(err, "consumer backlog")
	}
	if err := o.deadLetters(ctx, &r); err != nil {
		o.debug(err, "dead letters")
	}
	if o.cfg.Replicas != nil {
		if reps, err := o.cfg.Replicas(ctx); err != nil {
			o.debug(err, "replicas")
		} else {
			r.Replicas = reps
		}
	}
	if err := o.calendars(ctx, &r); err != nil {
		o.debug(err, "calendars")
	}
	o.mu.Lock()
	o.last = r
	o.mu.Unlock()
}

func (o *Observer) debug(err error, what string) {
	if !errors.Is(err, context.Canceled) {
		o.cfg.Log.Debug().Err(err).Str("figure", what).Msg("observer: not read")
	}
}

func (o *Observer) consumer(ctx context.Context, r *Reading) error {
	if o.cfg.JS == nil {
		return nil
	}
	c, err := o.cfg.JS.Consumer(ctx, o.cfg.Stream, o.cfg.Consumer)
	if err != nil {
		return err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	r.Pending, r.AckPending = info.NumPending, uint64(info.NumAckPending)
	if m := o.cfg.Metrics; m != nil {
		m.ConsumerPending.Set(float64(r.Pending))
		m.ConsumerAckPending.Set(float64(r.AckPending))
	}
	if o.cfg.BackfillConsumer == "" {
		return nil
	}
	if c, err = o.cfg.JS.Consumer(ctx, o.cfg.Stream, o.cfg.BackfillConsumer); err != nil {
		return err
	}
	if info, err = c.Info(ctx); err != nil {
		return err
	}
	r.BackfillPending = info.NumPending
	if m := o.cfg.Metrics; m != nil {
		m.BackfillPending.Set(float64(r.BackfillPending))
	}
	return nil
}

func (o *Observer) deadLetters(ctx context.Context, r *Reading) error {
	if o.cfg.JS == nil {
		return nil
	}
	s, err := o.cfg.JS.Stream(ctx, o.cfg.DLQStream)
	if err != nil {
		return err
	}
	prefix := o.cfg.DLQSubjectPrefix + "."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return err
	}
	counts := map[string]int{}
	for subj, n := range info.State.Subjects {
		if ds, ok := strings.CutPrefix(subj, prefix); ok {
			counts[ds] += int(n)
		}
	}
	r.DeadLetters = counts
	if m := o.cfg.Metrics; m != nil {
		values := map[string]float64{deadletter.InvalidSubjectToken: 0}
		if o.cfg.Datasets != nil {
			for _, ds := range o.cfg.Datasets() {
				values[ds] = 0
			}
		}
		for ds, n := range counts {
			values[ds] = float64(n)
		}
		o.show(m.DeadLettersPending, values)
	}
	return nil
}

// show sets vec to values and deletes the series it no longer has. It never
// resets the vector: a scrape between a reset and the new values would see
// the series missing, and Prometheus would restart the for: of an alert
// that reads it.
func (o *Observer) show(vec *prometheus.GaugeVec, values map[string]float64) {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	if o.shown == nil {
		o.shown = map[*prometheus.GaugeVec]map[string]bool{}
	}
	prev := o.shown[vec]
	now := make(map[string]bool, len(values))
	for label, v := range values {
		vec.WithLabelValues(label).Set(v)
		now[label] = true
	}
	for label := range prev {
		if !now[label] {
			vec.DeleteLabelValues(label)
		}
	}
	o.shown[vec] = now
}

func (o *Observer) calendars(ctx context.Context, r *Reading) error {
	if o.cfg.Calendars == nil || o.cfg.DB == nil {
		return nil
	}
	now := o.cfg.Now()
	sums := map[string]calendar.Summary{}
	var errs []error
	for _, c := range o.cfg.Calendars() {
		s, err := Summarize(ctx, o.cfg.DB, o.cfg.Pipeline, c, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sums[c.Dataset] = s
	}
	if len(errs) > 0 && len(sums) == 0 {
		return errors.Join(errs...)
	}
	r.Calendars = sums
	if m := o.cfg.Metrics; m != nil {
		missing, late, age := map[string]float64{}, map[string]float64{}, map[string]float64{}
		for ds, s := range sums {
			missing[ds], late[ds] = float64(s.Missing), float64(s.Late)
			if !s.NewestLoaded.IsZero() {
				age[ds] = now.Sub(s.NewestLoaded).Seconds()
			}
		}
		o.show(m.PartitionsMissing, missing)
		o.show(m.PartitionsLate, late)
		o.show(m.NewestPartitionAge, age)
	}
	return errors.Join(errs...)
}

// Summarize reads which of a calendar's partitions loaded and counts the
// missing and late ones at now.
func Summarize(ctx context.Context, db audit.Querier, pipeline string, c Calendar, now time.Time) (calendar.Summary, error) {
	ended := c.Expect.Ended(now, "", "")
	if len(ended) == 0 {
		return calendar.Summary{}, nil
	}
	loaded, err := audit.LoadedPartitions(ctx, db, pipeline, c.Dataset, ended[0].Key, ended[len(ended)-1].Key)
	if err != nil {
		return calendar.Summary{}, err
	}
	return c.Expect.Summarize(now, func(k string) bool { return loaded[k] }), nil
}
