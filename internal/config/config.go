package config

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/defaults"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// Defaults applied by WithDefaults to fields left empty or zero.
const (
	// DefaultStream is the JetStream stream holding partition-ready events.
	DefaultStream = "IDEM_EVENTS"
	// DefaultDLQStream is the JetStream stream holding dead letters.
	DefaultDLQStream = "IDEM_DLQ"
	// DefaultConsumer is the durable pull consumer on the events stream,
	// shared by every replica.
	DefaultConsumer = "idem"
	// DefaultSubjectPrefix prefixes event subjects: idem.ready.<dataset>.
	DefaultSubjectPrefix = "idem.ready"
	// DefaultDLQSubjectPrefix prefixes dead-letter subjects: idem.dlq.<dataset>.
	DefaultDLQSubjectPrefix = "idem.dlq"
	// DefaultResultsStream is the JetStream stream holding every event's
	// terminal outcome (idem publish --wait follows it).
	DefaultResultsStream = "IDEM_RESULTS"
	// DefaultResultsSubjectPrefix prefixes result subjects: idem.result.<dataset>.
	DefaultResultsSubjectPrefix = "idem.result"
	// DefaultResultsMaxAge is how long the results stream keeps a result.
	DefaultResultsMaxAge = 7 * 24 * time.Hour
	// DefaultResultsMaxBytes bounds the results stream (oldest go first).
	DefaultResultsMaxBytes = 1 << 30
	// DefaultNATSURL is a NATS server on the local machine.
	DefaultNATSURL = "nats://127.0.0.1:4222"
	// DefaultReverifyWindow is postgres.reverify_window's default.
	DefaultReverifyWindow = 15 * time.Minute
	// DefaultHTTPAddr serves /metrics, /healthz and /readyz on loopback only.
	DefaultHTTPAddr = "127.0.0.1:9464"
	// DefaultAckWait is how long JetStream waits for an ack before
	// redelivering; longer loads stay owned through in-progress heartbeats.
	DefaultAckWait = 30 * time.Second
	// DefaultDuplicates is the duplicate window of the streams idem creates:
	// a dead letter published twice within it is stored once.
	DefaultDuplicates = defaults.Duplicates
	// DefaultDeadLetterDuplicates is the dead-letter stream's duplicate
	// window: see consumer.DefaultDeadLetterDuplicates.
	DefaultDeadLetterDuplicates = defaults.DeadLetterDuplicates
	// DefaultMaxGroup is nats.max_group's default.
	DefaultMaxGroup = handlers.DefaultMaxGroup
	// DefaultMaxInFlight is how many loads one process runs at once.
	DefaultMaxInFlight = 16
	// DefaultBackfillShare is nats.backfill_share's default, in percent.
	DefaultBackfillShare = defaults.BackfillShare
	// DefaultRetries is how many times a transient failure is retried, so a
	// message gets DefaultRetries+1 loads that run (attempts counted in the
	// audit table, not JetStream deliveries).
	DefaultRetries = defaults.MaxAttempts - 1
	// DefaultRetryDelay is the first backoff delay after a transient failure.
	DefaultRetryDelay = defaults.RetryDelay
	// DefaultMaxRetryDelay caps the exponential backoff.
	DefaultMaxRetryDelay = defaults.MaxRetryDelay
	// DefaultRunIDColumn is the append_dedupe target column holding run_id.
	DefaultRunIDColumn = strategies.DefaultRunIDColumn
	// DefaultLoadSeqColumn is the append_dedupe target column holding the
	// load sequence idem assigns.
	DefaultLoadSeqColumn = strategies.DefaultLoadSeqColumn
	// DefaultSchema qualifies a target or view written without a schema.
	DefaultSchema = "public"
)

// Strategy is how a dataset's partition is loaded idempotently.
type Strategy string

const (
	// DeleteInsert deletes the partition's rows from the target and inserts
	// the source rows, in one transaction.
	DeleteInsert Strategy = "delete_insert"
	// Merge upserts on the key; with a version column, newer versions win.
	Merge Strategy = "merge"
	// AppendDedupe appends rows with run_id and a load sequence; a view keeps
	// the latest row per key.
	AppendDedupe Strategy = "append_dedupe"
)

// Strategies lists every strategy, in the order the docs present them.
var Strategies = []Strategy{DeleteInsert, Merge, AppendDedupe}

// Valid reports whether s is one of Strategies.
func (s Strategy) Valid() bool {
	switch s {
	case DeleteInsert, Merge, AppendDedupe:
		return true
	}
	return false
}

// Config is the whole idem configuration, as read from YAML (see the package
// doc for every field). Build one with Load or Parse, which apply
// environment overrides and WithDefaults; then call Validate.
type Config struct {
	// Pipeline names this set of datasets; it is the audit table's dag_id.
	// Required. Env IDEM_PIPELINE.
	Pipeline string `yaml:"pipeline"`
	// NATS says where events come from and dead letters go.
	NATS NATS `yaml:"nats"`
	// Postgres says where the datasets are loaded.
	Postgres Postgres `yaml:"postgres"`
	// HTTP says where /metrics, /healthz and /readyz are served.
	HTTP HTTP `yaml:"http"`
	// Audit says how long the audit table keeps attempts.
	Audit Audit `yaml:"audit,omitempty"`
	// Lineage says where OpenLineage run events go; absent, none are sent.
	Lineage Lineage `yaml:"lineage,omitempty"`
	// Tracing says where OpenTelemetry spans go; absent, none are exported.
	Tracing Tracing `yaml:"tracing,omitempty"`
	// S3 reaches the object store of the datasets whose files are in one.
	S3 S3 `yaml:"s3,omitempty"`
	// Defaults are the values datasets take for fields they leave out.
	Defaults DatasetDefaults `yaml:"defaults,omitempty"`
	// Datasets maps a dataset name (the last subject token) to how it loads.
	Datasets map[string]*Dataset `yaml:"datasets"`
}

// NATS is the connection, the JetStream names and the consumer's pace.
type NATS struct {
	// URL is one server URL or a comma-separated list. Default
	// DefaultNATSURL. Env IDEM_NATS_URL.
	URL string `yaml:"url"`
	// Stream holds events. Default DefaultStream. Env IDEM_NATS_STREAM.
	Stream string `yaml:"stream"`
	// DLQStream holds dead letters. Default DefaultDLQStream.
	// Env IDEM_NATS_DLQ_STREAM.
	DLQStream string `yaml:"dlq_stream"`
	// Consumer is the durable consumer's name. Default DefaultConsumer.
	// Env IDEM_NATS_CONSUMER.
	Consumer string `yaml:"consumer"`
	// SubjectPrefix prefixes event subjects. Default DefaultSubjectPrefix.
	SubjectPrefix string `yaml:"subject_prefix"`
	// DLQSubjectPrefix prefixes dead-letter subjects. Default
	// DefaultDLQSubjectPrefix.
	DLQSubjectPrefix string `yaml:"dlq_subject_prefix"`
	// AckWait is the consumer's ack wait, at least 1s and shorter than
	// Duplicates. Default DefaultAckWait.
	AckWait Duration `yaml:"ack_wait"`
	// Duplicates is the duplicate window of the streams idem creates,
	// longer than AckWait and 30s; 0 means DefaultDuplicates (see
	// DuplicateWindow). An existing stream's window is never changed.
	Duplicates Duration `yaml:"duplicates,omitempty"`
	// DeadLetterDuplicates is the dead-letter stream's duplicate window,
	// at least Duplicates; 0 means DefaultDeadLetterDuplicates (see
	// DeadLetterWindow). An existing dead-letter stream's shorter window is
	// raised to it, never lowered.
	DeadLetterDuplicates Duration `yaml:"dead_letter_duplicates,omitempty"`
	// MaxInFlight bounds the loads one process runs at once. Default
	// DefaultMaxInFlight.
	MaxInFlight int `yaml:"max_in_flight"`
	// BackfillShare is the percent of MaxInFlight that backfill events
	// (idem.backfill.<dataset>) may use while live events are held; without
	// live work they use every load. 1 to 100. Default
	// DefaultBackfillShare.
	BackfillShare int `yaml:"backfill_share,omitempty"`
	// MaxGroup is the most events of one dataset a group load takes (one
	// transaction for them all, when they are already fetched and waiting
	// for a load slot; see docs/RUNNING.md). 1 turns group loads off. Default
	// DefaultMaxGroup. Env IDEM_NATS_MAX_GROUP.
	MaxGroup int `yaml:"max_group,omitempty"`
	// Replicas of the streams idem creates (1 to 5; 3 in production). An
	// existing stream is never changed. Default 1.
	Replicas int `yaml:"replicas,omitempty"`
	// FleetBucket is the key-value bucket where the replicas of the consumer
	// say which datasets they know (see FleetBucketName).
	FleetBucket string `yaml:"fleet_bucket,omitempty"`
	// UnknownDatasetGrace is how long an event for a dataset no live replica
	// knows waits for a config that is rolling out before it is
	// dead-lettered as fatal; 0 means DefaultUnknownDatasetGrace.
	UnknownDatasetGrace Duration `yaml:"unknown_dataset_grace,omitempty"`

	// Creds is the path of a .creds file (JWT and nkey seed).
	// Env IDEM_NATS_CREDS.
	Creds string `yaml:"creds,omitempty"`
	// NKey is the path of an nkey seed file. Env IDEM_NATS_NKEY.
	NKey string `yaml:"nkey,omitempty"`
	// User and Password authenticate by user name. Env IDEM_NATS_USER,
	// IDEM_NATS_PASSWORD.
	User     string `yaml:"user,omitempty"`
	Password string `yaml:"password,omitempty"`
	// PasswordFile is read at Load into Password.
	PasswordFile string `yaml:"password_file,omitempty"`
	// Token authenticates by token. Env IDEM_NATS_TOKEN.
	Token string `yaml:"token,omitempty"`
	// TokenFile is read at Load into Token.
	TokenFile string `yaml:"token_file,omitempty"`
	// TLS configures TLS to the server; empty means whatever the URL says.
	TLS TLS `yaml:"tls,omitempty"`
	// Results is the stream of every event's terminal outcome.
	Results Results `yaml:"results,omitempty"`
}

// Results is the stream where idem publishes each event's terminal outcome
// (loaded, skipped, dead-lettered, rejected by its checks), for schedulers
// that wait for it (idem publish --wait). `idem streams` and `idem serve`
// create it with these limits; an existing stream keeps its own (change them
// with `nats stream edit`).
type Results struct {
	// Stream is its name. Default DefaultResultsStream. Env IDEM_NATS_RESULTS_STREAM.
	Stream string `yaml:"stream,omitempty"`
	// SubjectPrefix prefixes its subjects: <prefix>.<dataset>. Default
	// DefaultResultsSubjectPrefix.
	SubjectPrefix string `yaml:"subject_prefix,omitempty"`
	// MaxAge is how long a result is kept; a waiter that comes back later
	// than that finds its run through the ledger (a skipped result)
	// instead. Default DefaultResultsMaxAge.
	MaxAge Duration `yaml:"max_age,omitempty"`
	// MaxBytes bounds the stream; the oldest results go first. Default
	// DefaultResultsMaxBytes.
	MaxBytes int64 `yaml:"max_bytes,omitempty"`
}

// DefaultUnknownDatasetGrace: see NATS.UnknownDatasetGrace.
const DefaultUnknownDatasetGrace = defaults.UnknownDatasetGrace

// FleetBucketName is FleetBucket, or idem_fleet_<consumer> when empty: one
// fleet per durable consumer.
func (n *NATS) FleetBucketName() string {
	if n.FleetBucket != "" {
		return n.FleetBucket
	}
	return "idem_fleet_" + n.Consumer
}

// UnknownGrace is UnknownDatasetGrace, or DefaultUnknownDatasetGrace.
func (n *NATS) UnknownGrace() time.Duration {
	if n.UnknownDatasetGrace == 0 {
		return DefaultUnknownDatasetGrace
	}
	return n.UnknownDatasetGrace.Std()
}

// DuplicateWindow is Duplicates, or DefaultDuplicates when it is zero.
func (n *NATS) DuplicateWindow() time.Duration {
	if n.Duplicates == 0 {
		return DefaultDuplicates
	}
	return n.Duplicates.Std()
}

// DeadLetterWindow is DeadLetterDuplicates, or the longer of
// DefaultDeadLetterDuplicates and DuplicateWindow when it is zero.
func (n *NATS) DeadLetterWindow() time.Duration {
	if n.DeadLetterDuplicates == 0 {
		return max(DefaultDeadLetterDuplicates, n.DuplicateWindow())
	}
	return n.DeadLetterDuplicates.Std()
}

// TLS holds paths of PEM files.
type TLS struct {
	// CA verifies the server's certificate.
	CA string `yaml:"ca,omitempty"`
	// Cert and Key are the client certificate, for mutual TLS.
	Cert string `yaml:"cert,omitempty"`
	Key  string `yaml:"key,omitempty"`
	// InsecureSkipVerify skips verifying the server: tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify,omitempty"`
}

// Postgres is the database connection.
type Postgres struct {
	// URL is a libpq connection string or URL; TLS goes in it (sslmode).
	// Env IDEM_DATABASE_URL. Not required by Validate.
	URL string `yaml:"url,omitempty"`
	// URLFile is read at Load into URL.
	URLFile string `yaml:"url_file,omitempty"`
	// ReverifyWindow is how far back idem serve checks the events of the
	// stream against the ledger when the warehouse may have lost its last
	// commits (a promoted asynchronous standby: a new timeline or system
	// identifier), loading again each one whose success is gone. Default DefaultReverifyWindow. It must cover
	// the replication lag a failover may lose, and the stream must keep
	// events that long (max_age).
	ReverifyWindow Duration `yaml:"reverify_window,omitempty"`
	// Reverify false turns the re-verification off: for a warehouse whose
	// failover cannot lose acknowledged commits (synchronous replication).
	// Default true.
	Reverify *bool `yaml:"reverify,omitempty"`
	// StatementMode is how statements are sent: StatementAuto (default)
	// prepares named statements when idem talks to PostgreSQL itself and
	// sends unnamed ones behind a pooler, which idem detects at start;
	// StatementPrepare and StatementDescribe force one way.
	StatementMode string `yaml:"statement_mode,omitempty"`
}

// The values of postgres.statement_mode.
const (
	// StatementAuto picks StatementPrepare directly and StatementDescribe
	// behind a pooler.
	StatementAuto = "auto"
	// StatementPrepare: named prepared statements, cached per connection
	// (pgx's cache_statement). Behind a transaction pooler only with
	// protocol-level prepared statement support (PgBouncer 1.21+ with
	// max_prepared_statements).
	StatementPrepare = "prepare"
	// StatementDescribe: unnamed statements whose parameter and result
	// types are cached per connection (pgx's cache_describe); one round
	// trip, planned with each execution's values.
	StatementDescribe = "describe"
)

// ReverifyOn says whether idem serve re-verifies after a failover.
func (p Postgres) ReverifyOn() bool { return p.Reverify == nil || *p.Reverify }

// HTTP is the operations endpoint.
type HTTP struct {
	// Addr is host:port. Default DefaultHTTPAddr. Env IDEM_HTTP_ADDR.
	Addr string `yaml:"addr"`
	// Token enables the status page's actions (replay a dead letter,
	// backfill a range) for whoever gives it; empty keeps the page
	// read-only. At least MinHTTPTokenChars characters. Env IDEM_HTTP_TOKEN.
	Token string `yaml:"token,omitempty" json:"-"`
	// TokenFile reads Token from a file.
	TokenFile string `yaml:"token_file,omitempty" json:"-"`
	// TokenForReads requires Token (Authorization: Bearer) for the JSON
	// API under /api/v1/ too; false leaves its reads open like the page.
	// Needs Token.
	TokenForReads bool `yaml:"token_for_reads,omitempty"`
	// Pprof serves Go's runtime profiles (CPU, heap, allocations,
	// goroutines) under /debug/pprof/ to whoever gives Token, for a
	// platform engineer to see where a running serve spends its time.
	// Needs Token.
	Pprof bool `yaml:"pprof,omitempty"`
}

// MinHTTPTokenChars is the shortest operator token accepted.
const MinHTTPTokenChars = 16

// Dataset is one loadable dataset. Which fields apply depends on Strategy;
// Validate reports fields that do not.
type Dataset struct {
	// Name is the dataset's key in Config.Datasets, filled by WithDefaults.
	Name string `yaml:"-"`
	// Strategy is delete_insert, merge or append_dedupe. Required.
	Strategy Strategy `yaml:"strategy"`
	// Target is the table loaded, schema.table; WithDefaults qualifies a bare
	// table with DefaultSchema. Required.
	Target string `yaml:"target"`
	// PartitionColumn is the target column holding the partition key.
	// delete_insert: required. append_dedupe: optional; the view then dedupes
	// per partition and key, which lets partition filters reach the table.
	PartitionColumn string `yaml:"partition_column,omitempty"`
	// PartitionType is date (default), timestamp (an hour) or text.
	PartitionType schemas.PartitionType `yaml:"partition_type,omitempty"`
	// Key is the row identity. merge, append_dedupe: required.
	Key []string `yaml:"key,omitempty"`
	// VersionColumn makes merge update a row only from an equal or newer
	// version. merge: optional.
	VersionColumn string `yaml:"version_column,omitempty"`
	// View is the deduplicating view, schema.view. append_dedupe: required.
	View string `yaml:"view,omitempty"`
	// RunIDColumn holds run_id. append_dedupe only; default
	// DefaultRunIDColumn.
	RunIDColumn string `yaml:"run_id_column,omitempty"`
	// LoadSeqColumn holds the load sequence. append_dedupe only; default
	// DefaultLoadSeqColumn.
	LoadSeqColumn string `yaml:"load_seq_column,omitempty"`
	// Source is where the partition's rows come from: the SELECT that
	// produces them, with the pgx named arguments @partition and @run_id
	// (it never reads the clock), or files: or postgres: (Source).
	// Required.
	Source Source `yaml:"source"`
	// ReadyWhen, on a SELECT source: a SELECT of one boolean, bound like
	// the source, asked before each attempt; while false the event waits.
	ReadyWhen string `yaml:"ready_when,omitempty" json:",omitempty"`
	// WaitUpTo is how long an event whose source is not ready yet (files
	// without their ready marker, a replica too far behind, ready_when
	// false) waits, no attempt spent, before it is dead-lettered. Default
	// DefaultWaitUpTo.
	WaitUpTo Duration `yaml:"wait_up_to,omitempty"`
	// Then names datasets to trigger, same partition and run_id, after a
	// successful load.
	Then []string `yaml:"then,omitempty"`
	// Retries is how many times a transient failure is retried; nil means
	// DefaultRetries, 0 means no retry.
	Retries *int `yaml:"retries,omitempty"`
	// RetryDelay is the first backoff delay. Default DefaultRetryDelay.
	RetryDelay Duration `yaml:"retry_delay,omitempty"`
	// MaxRetryDelay caps the backoff. Default DefaultMaxRetryDelay.
	MaxRetryDelay Duration `yaml:"max_retry_delay,omitempty"`
	// Timeout is the load's statement timeout; 0 means none.
	Timeout Duration `yaml:"timeout,omitempty"`
	// MaxConcurrency bounds this dataset's loads running at once in one
	// process; 0 means only NATS.MaxInFlight applies.
	MaxConcurrency int `yaml:"max_concurrency,omitempty"`
	// KeepVersions is how many earlier versions of each partition a load
	// keeps in schema idem_archive (the rows it replaced, in its
	// transaction), for `idem restore`; at most MaxKeepVersions. Needs
	// partition_column. Default 0: nothing archived, no statement added.
	KeepVersions int `yaml:"keep_versions,omitempty" json:",omitempty"`
	// AllowEmpty lets an empty source partition load (and so empty the
	// partition); by default it is a fatal error, never a silent wipe.
	AllowEmpty bool `yaml:"allow_empty,omitempty"`
	// TruncatePartition makes delete_insert TRUNCATE the child of a natively
	// partitioned target that holds exactly the partition, instead of
	// deleting its rows. Faster and without dead tuples, but a reader whose
	// snapshot predates the load sees the partition empty, and the TRUNCATE
	// waits for the child's readers (at most a few seconds, then the load is
	// retried). delete_insert only; default false. (omitempty in JSON keeps
	// the config version of configs without it.)
	TruncatePartition bool `yaml:"truncate_partition,omitempty" json:",omitempty"`
	// Expect is the dataset's calendar: which partitions should exist and by
	// when. Optional; without it idem knows only the partitions published.
	Expect *Expect `yaml:"expect,omitempty" json:",omitempty"`
	// Watch lists a files: source's partitions to publish their events.
	Watch *Watch `yaml:"watch,omitempty" json:",omitempty"`
	// Recheck reloads the recent partitions whose source changed since
	// their last load (see Recheck).
	Recheck *Recheck `yaml:"recheck,omitempty" json:",omitempty"`
	// Checks are assertions on the rows each load produces, run inside the
	// load's transaction before it commits: a failing check of severity
	// error rolls the load back and dead-letters the event (see Check).
	Checks []Check `yaml:"checks,omitempty" json:",omitempty"`
	// OnSchemaChange is what a load does when the source's columns differ
	// from the target's: fail (refuse a new source column, listing every
	// difference and the ALTER TABLE that fixes it), ignore (load the
	// columns both have), append_new_columns (add a new source column to
	// the target in the load's transaction) or sync_all_columns (also widen
	// a column to the source's wider type). Default: defaults.on_schema_change,
	// else fail. (omitempty in JSON keeps the config version of configs
	// without it.)
	OnSchemaChange string `yaml:"on_schema_change,omitempty" json:",omitempty"`
	// OnDefinitionChange, for the partitions loaded under another
	// definition (source, strategy, key, checks, on_schema_change): none
	// lists them (`idem audit outdated`); reload also backfills them once
	// every live replica runs this one. Default none.
	OnDefinitionChange string `yaml:"on_definition_change,omitempty" json:",omitempty"`
}

// MaxKeepVersions bounds keep_versions: each version is a copy of the
// partition's rows.
const MaxKeepVersions = 100

// DatasetDefaults are the values a dataset takes when it leaves a field out.
type DatasetDefaults struct {
	// OnSchemaChange is every dataset's on_schema_change unless it sets its
	// own. Default fail.
	OnSchemaChange string `yaml:"on_schema_change,omitempty"`
}

// SchemaPolicy is the dataset's on_schema_change, the default when unset.
func (d *Dataset) SchemaPolicy() string {
	if d.OnSchemaChange == "" {
		return strategies.OnSchemaChangeFail
	}
	return d.OnSchemaChange
}

// Expect is a dataset's calendar, e.g. {every: day, from: 2026-01-01,
// deadline: 3h}: one partition per day from 2026-01-01, each due 3 hours
// after its day ends.
type Expect struct {
	// Every is day (a date dataset) or hour (a timestamp dataset).
	Every string `yaml:"every"`
	// From is the first expected partition's key: 2026-01-01, or
	// 2026-01-01T00:00:00Z for hours.
	From string `yaml:"from"`
	// Deadline is how long after its period ends a partition may be missing
	// before it is late. Default 0: late as soon as the period ends.
	Deadline Duration `yaml:"deadline,omitempty"`
	// Timezone is the IANA zone days are counted in (e.g. Europe/Paris).
	// Default UTC. Hours are always UTC.
	Timezone string `yaml:"timezone,omitempty"`
}

// Calendar is the dataset's calendar, when it has one and it is valid.
func (d *Dataset) Calendar() (calendar.Expect, bool) {
	if d.Expect == nil {
		return calendar.Expect{}, false
	}
	e, err := d.Expect.calendar()
	return e, err == nil
}

func (e *Expect) calendar() (calendar.Expect, error) {
	out := calendar.Expect{Every: calendar.Every(e.Every), From: e.From, Deadline: e.Deadline.Std()}
	if e.Timezone != "" {
		loc, err := time.LoadLocation(e.Timezone)
		if err != nil {
			return out, fmt.Errorf("timezone: %q is not a time zone; want an IANA name such as Europe/Paris or UTC", e.Timezone)
		}
		out.Location = loc
	}
	return out, out.Validate()
}

// WithDefaults fills every empty or zero field that has a default, in place,
// and names each dataset from its key. It is idempotent. Zero durations and
// counts mean "the default", so a zero written in YAML is the default too.
func (c *Config) WithDefaults() {
	setDefault(&c.NATS.URL, DefaultNATSURL)
	setDefault(&c.NATS.Stream, DefaultStream)
	setDefault(&c.NATS.DLQStream, DefaultDLQStream)
	setDefault(&c.NATS.Consumer, DefaultConsumer)
	setDefault(&c.NATS.SubjectPrefix, DefaultSubjectPrefix)
	setDefault(&c.NATS.DLQSubjectPrefix, DefaultDLQSubjectPrefix)
	setDefault(&c.NATS.Results.Stream, DefaultResultsStream)
	setDefault(&c.NATS.Results.SubjectPrefix, DefaultResultsSubjectPrefix)
	if c.NATS.Results.MaxAge == 0 {
		c.NATS.Results.MaxAge = Duration(DefaultResultsMaxAge)
	}
	if c.NATS.Results.MaxBytes == 0 {
		c.NATS.Results.MaxBytes = DefaultResultsMaxBytes
	}
	if c.NATS.AckWait == 0 {
		c.NATS.AckWait = Duration(DefaultAckWait)
	}
	if c.NATS.MaxInFlight == 0 {
		c.NATS.MaxInFlight = DefaultMaxInFlight
	}
	if c.NATS.MaxGroup == 0 {
		c.NATS.MaxGroup = DefaultMaxGroup
	}
	if c.NATS.BackfillShare == 0 {
		c.NATS.BackfillShare = DefaultBackfillShare
	}
	setDefault(&c.HTTP.Addr, DefaultHTTPAddr)
	if c.Postgres.ReverifyWindow == 0 {
		c.Postgres.ReverifyWindow = Duration(DefaultReverifyWindow)
	}
	setDefault(&c.Postgres.StatementMode, StatementAuto)
	if c.Audit.Retention == nil {
		r := DefaultAuditRetention
		c.Audit.Retention = &r
	}
	c.observabilityDefaults()
	for name, d := range c.Datasets {
		if d == nil {
			d = &Dataset{}
			c.Datasets[name] = d
		}
		d.Name = name
		setDefault(&d.OnSchemaChange, c.Defaults.OnSchemaChange)
		d.withDefaults()
	}
}

func (d *Dataset) withDefaults() {
	if d.PartitionType == "" {
		d.PartitionType = schemas.PartitionDate
	}
	d.Target = qualify(d.Target)
	d.View = qualify(d.View)
	if d.Strategy == AppendDedupe {
		setDefault(&d.RunIDColumn, DefaultRunIDColumn)
		setDefault(&d.LoadSeqColumn, DefaultLoadSeqColumn)
	}
	if d.Retries == nil {
		r := DefaultRetries
		d.Retries = &r
	}
	if d.RetryDelay == 0 {
		d.RetryDelay = Duration(DefaultRetryDelay)
	}
	if d.MaxRetryDelay == 0 {
		d.MaxRetryDelay = Duration(DefaultMaxRetryDelay)
	}
	d.Watch.withDefaults()
	d.Recheck.withDefaults()
}

func setDefault(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

// qualify prefixes DefaultSchema to a name without a schema.
func qualify(name string) string {
	if name == "" || strings.Contains(name, ".") {
		return name
	}
	return DefaultSchema + "." + name
}

// splitQualified splits schema.name; a bare name is in DefaultSchema.
func splitQualified(s string) (schema, name string) {
	if schema, name, ok := strings.Cut(s, "."); ok {
		return schema, name
	}
	return DefaultSchema, s
}

// MaxAttempts is how many loads of one event of this dataset may run:
// Retries+1 (DefaultRetries+1 when Retries is nil, 1 when negative).
func (d *Dataset) MaxAttempts() int {
	r := DefaultRetries
	if d.Retries != nil {
		r = max(*d.Retries, 0)
	}
	if r == math.MaxInt {
		return r
	}
	return r + 1
}

// TargetTable splits Target into schema and table; a bare table is in the
// public schema.
func (d *Dataset) TargetTable() (schema, table string) { return splitQualified(d.Target) }

// ViewName splits View into schema and view name; a bare name is in the
// public schema.
func (d *Dataset) ViewName() (schema, name string) { return splitQualified(d.View) }

// Upstreams names the datasets whose then: lists dataset, in name order.
// More than one make it a join.
func (c *Config) Upstreams(dataset string) []string {
	var out []string
	for _, name := range c.DatasetNames() {
		if slices.Contains(c.Datasets[name].Then, dataset) {
			out = append(out, name)
		}
	}
	return out
}

// DatasetNames lists the configured dataset names, sorted.
func (c *Config) DatasetNames() []string {
	names := make([]string, 0, len(c.Datasets))
	for name := range c.Datasets {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Lookup is a dataset's partition type, as schemas.Decode asks for it (a
// [schemas.Lookup]); ok is false for a dataset the config does not hold.
// Decode with c.Lookup validates an event as the consumer will.
func (c *Config) Lookup(dataset string) (t schemas.PartitionType, ok bool) {
	d, ok := c.Datasets[dataset]
	if !ok {
		return "", false
	}
	return partitionType(d), true
}
