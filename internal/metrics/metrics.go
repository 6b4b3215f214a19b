// Package metrics defines idem's Prometheus metrics (every name prefixed
// idem_) on a registry of its own, and adapts them to the consumer's hooks.
// It holds no global state: `idem serve` builds one and serves it on /metrics.
package metrics

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/deadletter"
)

// Metrics are the collectors of one process.
type Metrics struct {
	Registry *prometheus.Registry

	Events       *prometheus.CounterVec   // dataset, outcome
	LoadDuration *prometheus.HistogramVec // dataset, status
	RowsWritten  *prometheus.CounterVec   // dataset
	DeadLetters  *prometheus.CounterVec   // dataset, kind
	Duplicates   *prometheus.CounterVec   // dataset
	Redeliveries *prometheus.CounterVec   // dataset
	Heartbeats   *prometheus.CounterVec   // dataset
	InFlight     prometheus.Gauge
	LaneInFlight *prometheus.GaugeVec // lane: live, backfill
	// OutboxPublished counts downstream events the relay published.
	OutboxPublished prometheus.Counter
	// OutboxPublishFailures counts relay publishes that failed (the row
	// retries after its backoff).
	OutboxPublishFailures prometheus.Counter
	// DeadLetterResults counts the results of dead letters published
	// directly (result: published or failed).
	DeadLetterResults *prometheus.CounterVec
	// OutboxBacklog and OutboxOldestPending describe idem.outbox, the whole
	// table: every replica reports the same values (aggregate with max).
	OutboxBacklog       prometheus.Gauge
	OutboxOldestPending prometheus.Gauge
	// WarehouseUp is 1 while the warehouse circuit is closed, 0 while open;
	// CircuitOpens counts the openings.
	WarehouseUp  prometheus.Gauge
	CircuitOpens prometheus.Counter
	// DatasetPaused is 1 while an operator's pause holds a dataset's
	// events, 0 otherwise.
	DatasetPaused *prometheus.GaugeVec
	BuildInfo     *prometheus.GaugeVec // version
	// ConfigInfo is 1 for the config version this process runs.
	ConfigInfo *prometheus.GaugeVec // version
	// ConfigReloads counts SIGHUP reloads by result: applied, refused.
	ConfigReloads *prometheus.CounterVec

	// Ready is 1 while this process would answer /readyz with 200.
	Ready prometheus.Gauge
	// ConsumerPending and ConsumerAckPending are the durable consumer's
	// undelivered and delivered-but-unacknowledged messages; every replica
	// reports the same values (aggregate with max).
	ConsumerPending    prometheus.Gauge
	ConsumerAckPending prometheus.Gauge
	// BackfillPending is the backfill durable's events not yet delivered.
	BackfillPending prometheus.Gauge
	// DeadLettersPending is the number of messages in the dead-letter
	// stream, by dataset.
	DeadLettersPending *prometheus.GaugeVec
	// PartitionsMissing and PartitionsLate count, per dataset with a
	// calendar, ended partitions without a successful load, within and past
	// their deadline; NewestPartitionAge is the time since the end of the
	// newest loaded partition's period.
	PartitionsMissing  *prometheus.GaugeVec
	PartitionsLate     *prometheus.GaugeVec
	NewestPartitionAge *prometheus.GaugeVec
	// AuditPruned counts attempts the audit retention deleted.
	AuditPruned prometheus.Counter
	// WatchPublished counts the partitions the watches published (reason
	// new, changed or retry); WatchFailures their listings and publishes
	// that failed.
	WatchPublished *prometheus.CounterVec // dataset, reason
	WatchFailures  *prometheus.CounterVec // dataset
	// RecheckAsked counts the fingerprints the rechecks took (one query
	// each, or one listing); RecheckReloads the reloads they published;
	// RecheckFailures the partitions they could not recheck.
	RecheckAsked, RecheckReloads, RecheckFailures *prometheus.CounterVec // dataset
	// ReverifyPasses counts re-verification passes by result (ok, error);
	// ReverifyReloaded counts the events they loaded again (the warehouse
	// had lost their loads); ReverifyLast is the end of the last pass.
	ReverifyPasses   *prometheus.CounterVec
	ReverifyReloaded prometheus.Counter
	ReverifyLast     prometheus.Gauge
	// Checks counts the outcomes of the datasets' checks: pass, fail (the
	// load was refused), warn, skipped.
	Checks *prometheus.CounterVec // dataset, check, result
	// SchemaChanges counts the schema changes loads met, by what they did:
	// added, widened, ignored, kept, refused, found.
	SchemaChanges *prometheus.CounterVec // dataset, change, action
}

// New registers every collector, plus the Go and process collectors.
func New(version string) *Metrics {
	r := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m := &Metrics{
		Registry: r,
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_events_total", Help: "Deliveries settled, by dataset and outcome: acked (loaded or duplicate), retried, waiting (its source not ready), interrupted (shutdown), dead_lettered, dead_letter_failed.",
		}, []string{"dataset", "outcome"}),
		LoadDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "idem_load_duration_seconds", Help: "Time from the handler's start to its end, by dataset and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900},
		}, []string{"dataset", "status"}),
		RowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_rows_written_total", Help: "Rows inserted or updated by successful loads.",
		}, []string{"dataset"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_dead_letters_total", Help: "Dead letters acknowledged by the DLQ stream, by kind (fatal, exhausted, crashed).",
		}, []string{"dataset", "kind"}),
		Duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_duplicates_skipped_total", Help: "Events whose run had already succeeded: acknowledged without work.",
		}, []string{"dataset"}),
		Redeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_redeliveries_total", Help: "Deliveries with a delivery count above 1.",
		}, []string{"dataset"}),
		Heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_heartbeats_total", Help: "InProgress heartbeats sent for long loads.",
		}, []string{"dataset"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_loads_in_flight", Help: "Messages this process holds: loading or waiting for their dataset's turn.",
		}),
		LaneInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idem_lane_loads_in_flight", Help: "Loads running in this process per lane: live (idem.ready) or backfill (idem.backfill).",
		}, []string{"lane"}),
		OutboxPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_outbox_published_total", Help: "Downstream events (then:) and results published from the outbox.",
		}),
		OutboxPublishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_outbox_publish_failures_total", Help: "Outbox publishes that failed; the row is retried after its own backoff.",
		}),
		DeadLetterResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_dead_letter_results_total", Help: "Results of dead-lettered events published on the results stream (result=published) or given up after their retries (result=failed; a waiter still finds the dead letter).",
		}, []string{"status", "result"}),
		OutboxBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_outbox_backlog", Help: "Downstream events and results in idem.outbox not yet published (due or backing off); the same for every replica.",
		}),
		OutboxOldestPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_outbox_oldest_pending_seconds", Help: "Age of the oldest unpublished event in idem.outbox; 0 when none waits.",
		}),
		WarehouseUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_warehouse_up", Help: "1 while PostgreSQL takes loads; 0 while the warehouse circuit is open (fetching paused, messages held, probing).",
		}),
		DatasetPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idem_dataset_paused", Help: "1 while the dataset is paused (`idem pause`): its events are held, nothing loads; 0 otherwise.",
		}, []string{"dataset"}),
		CircuitOpens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_warehouse_circuit_opens_total", Help: "Times the warehouse circuit opened: PostgreSQL could not be used at all.",
		}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_config_reloads_total", Help: "Config reloads (SIGHUP) by result: applied, or refused (the old config keeps serving; the log says why).",
		}, []string{"result"}),
		ConfigInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idem_config_info", Help: "Always 1; the version label is a hash of the pipeline and datasets this process runs.",
		}, []string{"version"}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idem_build_info", Help: "Always 1; the version label tells the build.",
		}, []string{"version"}),
	}
	for _, c := range []prometheus.Collector{m.Events, m.LoadDuration, m.RowsWritten, m.DeadLetters, m.Duplicates,
		m.Redeliveries, m.Heartbeats, m.InFlight, m.LaneInFlight, m.OutboxPublished, m.WarehouseUp, m.CircuitOpens, m.DatasetPaused, m.ConfigInfo, m.ConfigReloads, m.BuildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	for _, lane := range []string{consumer.LaneLive, consumer.LaneBackfill} {
		m.LaneInFlight.WithLabelValues(lane).Set(0)
	}
	m.Ready = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idem_ready", Help: "1 while this process answers /readyz with 200 (NATS connected, warehouse usable), else 0.",
	})
	m.ConsumerPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idem_consumer_pending", Help: "Events in the stream not yet delivered to the durable consumer; the same for every replica.",
	})
	m.ConsumerAckPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idem_consumer_ack_pending", Help: "Events delivered to some replica and not yet acknowledged; the same for every replica.",
	})
	m.BackfillPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idem_backfill_pending", Help: "Backfill events (idem.backfill) not yet delivered to the backfill durable consumer; the same for every replica.",
	})
	m.DeadLettersPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idem_dead_letters_pending", Help: "Messages in the dead-letter stream, by dataset: not yet replayed or purged.",
	}, []string{"dataset"})
	m.PartitionsMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idem_partitions_missing", Help: "Partitions of the dataset's calendar (expect:) whose period ended without a successful load, still within the deadline.",
	}, []string{"dataset"})
	m.PartitionsLate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idem_partitions_late", Help: "Partitions of the dataset's calendar (expect:) without a successful load past their deadline.",
	}, []string{"dataset"})
	m.NewestPartitionAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idem_newest_partition_age_seconds", Help: "Seconds since the end of the period of the dataset's newest partition with a successful load (calendar datasets).",
	}, []string{"dataset"})
	m.AuditPruned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_audit_pruned_total", Help: "Attempts deleted from idem.pipeline_audit by the audit retention (audit.retention).",
	})
	m.WatchPublished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_watch_published_total", Help: "Partitions a watch (watch:) published, by dataset and reason: new (never loaded), changed (its files differ from its last load's), retry (its listing's event was dead-lettered for no fault of its files).",
	}, []string{"dataset", "reason"})
	m.WatchFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_watch_failures_total", Help: "Listings and publishes of a watch that failed; the next pass tries again.",
	}, []string{"dataset"})
	m.RecheckAsked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_recheck_fingerprints_total", Help: "Fingerprints of a partition's source a recheck (recheck:) took: one query, or one listing, each.",
	}, []string{"dataset"})
	m.RecheckReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_recheck_reloads_total", Help: "Reloads a recheck published: partitions whose source changed since their last load.",
	}, []string{"dataset"})
	m.RecheckFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_recheck_failures_total", Help: "Partitions a recheck could not recheck (a fingerprint or a publish failed); the next pass tries again.",
	}, []string{"dataset"})
	m.ReverifyPasses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_reverify_passes_total", Help: "Re-verifications of the recent events against the ledger (after a failover: a new server identity), by result: ok, error.",
	}, []string{"result"})
	m.ReverifyReloaded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_reverify_reloaded_total", Help: "Acknowledged events loaded again because the warehouse had lost their loads (a failover to a standby without the last commits).",
	})
	m.ReverifyLast = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idem_reverify_last_pass_timestamp_seconds", Help: "When the last re-verification pass of this process ended (Unix time); 0 before the first.",
	})
	m.Checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_checks_total", Help: "Outcomes of the datasets' checks, by dataset, check and result: pass, fail (the load was rolled back), warn, skipped.",
	}, []string{"dataset", "check", "result"})
	m.SchemaChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_schema_changes_total", Help: "Schema changes the loads met (on_schema_change), by dataset, change (new_column, retyped, missing_column) and action: added, widened, ignored, kept, refused, found.",
	}, []string{"dataset", "change", "action"})
	for _, c := range []prometheus.Collector{m.Checks, m.SchemaChanges, m.DeadLetterResults, m.OutboxPublishFailures, m.OutboxBacklog, m.OutboxOldestPending,
		m.Ready, m.ConsumerPending, m.ConsumerAckPending, m.BackfillPending, m.DeadLettersPending, m.PartitionsMissing, m.PartitionsLate, m.NewestPartitionAge,
		m.AuditPruned, m.WatchPublished, m.WatchFailures, m.RecheckAsked, m.RecheckReloads, m.RecheckFailures, m.ReverifyPasses, m.ReverifyReloaded, m.ReverifyLast} {
		f(c)
	}
	m.BuildInfo.WithLabelValues(version).Set(1)
	m.WarehouseUp.Set(1)
	m.ReverifyPasses.WithLabelValues("ok").Add(0)
	m.ReverifyPasses.WithLabelValues("error").Add(0)
	return m
}

// Datasets makes the series the alert rules read exist at 0 for every
// dataset label the consumer can report (the configured datasets and
// consumer.InvalidDataset): dead letters of every kind, and dead letters
// that could not be published, so the first one is an increase Prometheus
// can see, not a series born at 1. Call it
// at start and after a reload; series of removed datasets stay as they are
// (a counter must not go back).
func (m *Metrics) Datasets(names []string) {
	for _, ds := range append(slices.Clone(names), consumer.InvalidDataset) {
		for _, k := range deadletter.Kinds() {
			m.DeadLetters.WithLabelValues(ds, string(k)).Add(0)
		}
		m.Events.WithLabelValues(ds, string(consumer.OutcomeDeadLetterFailed)).Add(0)
	}
}

// DatasetChecks makes the failure series of a dataset's checks exist at 0,
// like Datasets, so the first refused load pages.
func (m *Metrics) DatasetChecks(dataset string, checks []string) {
	for _, c := range checks {
		m.Checks.WithLabelValues(dataset, c, "fail").Add(0)
	}
}

// Tracing registers the counters of the spans that never reached the
// collector: dropped (the export queue was full) and failed (the export
// failed), read from the tracer provider at each scrape. Both exist, at 0,
// with tracing off.
func (m *Metrics) Tracing(dropped, failed func() uint64) {
	m.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idem_trace_spans_dropped_total", Help: "Spans dropped because the export queue was full (the collector slower than idem, or down); loads do not wait for it.",
		}, func() float64 { return float64(dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idem_trace_spans_failed_total", Help: "Spans whose export to the collector failed (unreachable, refused); they are not retried.",
		}, func() float64 { return float64(failed()) }),
	)
}

// WarehouseRefused reports, at each scrape, whether the warehouse circuit is
// open because PostgreSQL or the pooler in front of it refuses idem's login
// (a rotated password, a dropped role or database): an outage that a
// person ends by fixing a setting, not one that passes by itself.
func (m *Metrics) WarehouseRefused(refused func() bool) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_warehouse_refused", Help: "1 while the warehouse circuit is open because PostgreSQL (or its pooler) refuses idem's login: a password, role, database or startup parameter to fix; /readyz says which.",
	}, func() float64 {
		if refused() {
			return 1
		}
		return 0
	}))
}

// Hooks adapts the metrics to the consumer.
func (m *Metrics) Hooks() consumer.Hooks {
	return consumer.Hooks{
		Event: func(dataset string, o consumer.Outcome, _ time.Duration) {
			m.Events.WithLabelValues(dataset, string(o)).Inc()
		},
		DeadLetter: func(dataset string, k consumer.Kind) { m.DeadLetters.WithLabelValues(dataset, string(k)).Inc() },
		Redelivery: func(dataset string) { m.Redeliveries.WithLabelValues(dataset).Inc() },
		InFlight:   func(n int) { m.InFlight.Set(float64(n)) },
		LaneInFlight: func(lane string, n int) {
			m.LaneInFlight.WithLabelValues(lane).Set(float64(n))
		},
		Heartbeat: func(dataset string) { m.Heartbeats.WithLabelValues(dataset).Inc() },
		Circuit: func(up bool) {
			if up {
				m.WarehouseUp.Set(1)
				return
			}
			m.WarehouseUp.Set(0)
			m.CircuitOpens.Inc()
		},
	}
}

// Load records one handled load.
func (m *Metrics) Load(dataset, status string, d time.Duration, rows int64) {
	m.LoadDuration.WithLabelValues(dataset, status).Observe(d.Seconds())
	switch status {
	case "success":
		m.RowsWritten.WithLabelValues(dataset).Add(float64(rows))
	case "skipped":
		m.Duplicates.WithLabelValues(dataset).Inc()
	}
}

// OutboxBacklogSet records the outbox's backlog (the relay's Backlog hook).
func (m *Metrics) OutboxBacklogSet(pending int64, oldest time.Duration) {
	m.OutboxBacklog.Set(float64(pending))
	m.OutboxOldestPending.Set(oldest.Seconds())
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
