package config

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idem-data/idem/internal/sqlcheck"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// Problem is one thing wrong with a config.
type Problem struct {
	// Dataset is the dataset's name, or empty for a top-level field.
	Dataset string
	// Field is the YAML key, dotted from the top for top-level fields
	// (nats.ack_wait) and from the dataset for dataset fields (key).
	Field string
	// Message says what is wrong and how to fix it.
	Message string
}

// String formats p as one line: `dataset "orders": key: message`.
func (p Problem) String() string {
	var b strings.Builder
	if p.Dataset != "" {
		fmt.Fprintf(&b, "dataset %q: ", p.Dataset)
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is every problem Validate found. Use errors.As to get it back from
// the error.
type Problems []Problem

// Error lists the problems, one per line.
func (p Problems) Error() string {
	lines := make([]string, len(p))
	for i, pr := range p {
		lines[i] = pr.String()
	}
	return strings.Join(lines, "\n")
}

// Validate checks the whole config without touching NATS or Postgres and
// returns nil or Problems listing every problem found, top-level fields first,
// then datasets by name. Call it after WithDefaults (Load and Parse do): a
// zero value that WithDefaults would fill is reported as a problem.
func (c *Config) Validate() error {
	v := &validator{}
	c.validateTop(v)
	validateSchemaPolicy(v, "defaults.on_schema_change", c.Defaults.OnSchemaChange)
	names := c.DatasetNames()
	for _, name := range names {
		d := c.Datasets[name]
		if d == nil {
			d = &Dataset{}
		}
		v.dataset = name
		c.validateDataset(v, names, name, d)
	}
	v.dataset = ""
	c.validateCycles(v, names)
	if len(v.problems) == 0 {
		return nil
	}
	return v.problems
}

type validator struct {
	dataset  string // the dataset being checked, "" at the top level
	problems Problems
}

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, Problem{Dataset: v.dataset, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (c *Config) validateTop(v *validator) {
	if strings.TrimSpace(c.Pipeline) == "" {
		v.add("pipeline", "required; name the pipeline, e.g. pipeline: shop (it is the audit table's dag_id), or set IDEM_PIPELINE")
	}
	if len(c.Datasets) == 0 {
		v.add("datasets", "none declared; declare at least one dataset under datasets:, with its strategy, target and source")
	}
	n := &c.NATS
	if strings.TrimSpace(n.URL) == "" {
		v.add("nats.url", "required; e.g. %s, or set IDEM_NATS_URL", DefaultNATSURL)
	}
	natsName(v, "nats.stream", n.Stream, DefaultStream)
	natsName(v, "nats.dlq_stream", n.DLQStream, DefaultDLQStream)
	natsName(v, "nats.consumer", n.Consumer, DefaultConsumer)
	if n.Stream != "" && n.Stream == n.DLQStream {
		v.add("nats.dlq_stream", "same as nats.stream (%q); dead letters need a stream of their own, e.g. %s", n.Stream, DefaultDLQStream)
	}
	okEvents := subjectPrefix(v, "nats.subject_prefix", n.SubjectPrefix, DefaultSubjectPrefix)
	okDLQ := subjectPrefix(v, "nats.dlq_subject_prefix", n.DLQSubjectPrefix, DefaultDLQSubjectPrefix)
	if okEvents && okDLQ && subjectsOverlap(n.SubjectPrefix, n.DLQSubjectPrefix) {
		v.add("nats.dlq_subject_prefix", "%q overlaps nats.subject_prefix %q, so one stream would capture the other's messages; use prefixes where neither starts with the other, e.g. %s and %s",
			n.DLQSubjectPrefix, n.SubjectPrefix, DefaultSubjectPrefix, DefaultDLQSubjectPrefix)
	}
	if bp := schemas.BackfillPrefix(n.SubjectPrefix); okEvents {
		for _, other := range []string{n.SubjectPrefix, n.DLQSubjectPrefix, n.Results.SubjectPrefix} {
			if other != "" && subjectsOverlap(bp, other) {
				v.add("nats.subject_prefix", "%q puts backfills on %s.<dataset>, which overlaps %q; end it in another token than backfill, e.g. %s",
					n.SubjectPrefix, bp, other, DefaultSubjectPrefix)
			}
		}
	}
	r := &n.Results
	natsName(v, "nats.results.stream", r.Stream, DefaultResultsStream)
	for _, other := range []string{n.Stream, n.DLQStream} {
		if r.Stream != "" && r.Stream == other {
			v.add("nats.results.stream", "%q is already another of idem's streams; results need a stream of their own, e.g. %s", r.Stream, DefaultResultsStream)
		}
	}
	if subjectPrefix(v, "nats.results.subject_prefix", r.SubjectPrefix, DefaultResultsSubjectPrefix) {
		for _, other := range []string{n.SubjectPrefix, n.DLQSubjectPrefix} {
			if other != "" && subjectsOverlap(r.SubjectPrefix, other) {
				v.add("nats.results.subject_prefix", "%q overlaps %q, so one stream would capture the other's messages; e.g. %s", r.SubjectPrefix, other, DefaultResultsSubjectPrefix)
			}
		}
	}
	if r.MaxAge < 0 || r.MaxAge > 0 && r.MaxAge < Duration(time.Minute) {
		v.add("nats.results.max_age", "%s: want at least 1m (a waiting publisher reads its result from there)", r.MaxAge)
	}
	if r.MaxBytes < 0 || r.MaxBytes > 0 && r.MaxBytes < 1<<20 {
		v.add("nats.results.max_bytes", "%d: want at least 1048576 (1 MiB); a result is about 1 KB", r.MaxBytes)
	}
	if n.AckWait < Duration(time.Second) {
		v.add("nats.ack_wait", "%s is too short; use at least 1s (loads longer than ack_wait stay owned through heartbeats, so it need not cover the longest load)", n.AckWait)
	}
	validateDuplicates(v, n)
	if w := c.Postgres.ReverifyWindow; w < 0 || w > 0 && w < Duration(time.Minute) {
		v.add("postgres.reverify_window", "%s: want at least 1m (it must cover the replication lag a failover may lose), or postgres.reverify: false to turn it off", w)
	}
	switch c.Postgres.StatementMode {
	case StatementAuto, StatementPrepare, StatementDescribe:
	default:
		v.add("postgres.statement_mode", "%q; use auto (default: prepared statements directly, unnamed ones behind a pooler), prepare or describe", c.Postgres.StatementMode)
	}
	if n.MaxGroup < 1 || n.MaxGroup > 256 {
		v.add("nats.max_group", "%d; use 1 (group loads off) to 256 (default %d)", n.MaxGroup, DefaultMaxGroup)
	}
	if n.BackfillShare < 1 || n.BackfillShare > 100 {
		v.add("nats.backfill_share", "%d; use a percent of max_in_flight from 1 to 100 (default %d)", n.BackfillShare, DefaultBackfillShare)
	}
	if n.MaxInFlight < 1 {
		v.add("nats.max_in_flight", "%d; use at least 1 (default %d)", n.MaxInFlight, DefaultMaxInFlight)
	}
	var methods []string
	if n.Creds != "" {
		methods = append(methods, "creds")
	}
	if n.NKey != "" {
		methods = append(methods, "nkey")
	}
	if n.User != "" || n.Password != "" {
		methods = append(methods, "user/password")
	}
	if n.Token != "" {
		methods = append(methods, "token")
	}
	if len(methods) > 1 {
		v.add("nats", "several ways to authenticate are set (%s); keep one", strings.Join(methods, ", "))
	}
	if n.User != "" && n.Password == "" {
		v.add("nats.password", "user %q has no password; set password, password_file or IDEM_NATS_PASSWORD", n.User)
	}
	if n.User == "" && n.Password != "" {
		v.add("nats.user", "a password is set without a user; set user or IDEM_NATS_USER")
	}
	if (n.TLS.Cert == "") != (n.TLS.Key == "") {
		if n.TLS.Cert == "" {
			v.add("nats.tls.cert", "tls.key is set without a certificate; mutual TLS needs both cert and key")
		} else {
			v.add("nats.tls.key", "tls.cert is set without its key; mutual TLS needs both cert and key")
		}
	}
	// The default name derives from the consumer's, whose own problems are
	// reported above; only a name that is bad on its own is reported here.
	if b := c.NATS.FleetBucketName(); !validBucket(b) && (c.NATS.FleetBucket != "" || !strings.ContainsAny(c.NATS.Consumer, ".*>/\\ \t")) {
		v.add("nats.fleet_bucket", "%q is not a key-value bucket name; use letters, digits, '-' and '_' (e.g. idem_fleet)", b)
	}
	if c.NATS.UnknownDatasetGrace < 0 {
		v.add("nats.unknown_dataset_grace", "%s must not be negative; e.g. 5m, the longest a rolling deploy takes", c.NATS.UnknownDatasetGrace)
	}
	if c.NATS.Replicas < 0 || c.NATS.Replicas > 5 {
		v.add("nats.replicas", "%d is not a replica count; JetStream takes 1 to 5 (3 in production)", c.NATS.Replicas)
	}
	if host, port, err := net.SplitHostPort(c.HTTP.Addr); err != nil || !validPort(port) || strings.ContainsAny(host, " \t") {
		v.add("http.addr", "%q is not host:port; e.g. %s, or :9464 for every interface", c.HTTP.Addr, DefaultHTTPAddr)
	}
	validateAudit(v, c.Audit)
	c.validateObservability(v)
	if c.HTTP.TokenForReads && c.HTTP.Token == "" {
		v.add("http.token_for_reads", "needs http.token (or IDEM_HTTP_TOKEN): the API's readers give that token")
	}
	if c.HTTP.Pprof && c.HTTP.Token == "" {
		v.add("http.pprof", "needs http.token (or IDEM_HTTP_TOKEN): the profiles are served to whoever gives that token")
	}
	if t := c.HTTP.Token; t != "" && (len(t) < MinHTTPTokenChars || strings.TrimSpace(t) != t) {
		v.add("http.token", "too weak: at least %d characters without surrounding space; e.g. the output of `openssl rand -hex 24`", MinHTTPTokenChars)
	}
}

// reconcilerAckWait is the ack wait of the consumer's reconciler, which
// dead-letters the messages whose process died on every delivery.
const reconcilerAckWait = Duration(30 * time.Second)

// validateDuplicates checks that a dead letter published a second time is
// dropped as a duplicate: JetStream drops a publish whose Nats-Msg-Id it has
// seen within the stream's duplicate window, and the second publish comes
// after ack_wait (a Term lost after the dead letter was stored) or after the
// reconciler's 30s (an advisory whose ack was lost).
func validateDuplicates(v *validator, n *NATS) {
	if n.Duplicates < 0 {
		v.add("nats.duplicates", "%s; use a positive duration such as %s, or leave it out for the default", n.Duplicates, Duration(DefaultDuplicates))
		return
	}
	window := Duration(n.DuplicateWindow())
	if window <= reconcilerAckWait {
		v.add("nats.duplicates", "%s is too short; use more than %s (default %s): the reconciler dead-letters a message again when its advisory's ack is lost, %s later, "+
			"and the dead-letter stream drops that second dead letter only within its duplicate window", window, reconcilerAckWait, Duration(DefaultDuplicates), reconcilerAckWait)
	}
	if n.AckWait >= Duration(time.Second) && n.AckWait >= window {
		v.add("nats.ack_wait", "%s is not shorter than the duplicate window nats.duplicates (%s): a message whose Term is lost after its dead letter was stored comes back after ack_wait "+
			"and is dead-lettered again, and the dead-letter stream drops that second dead letter only within its duplicate window; lower ack_wait or raise nats.duplicates above it", n.AckWait, window)
	}
	if n.DeadLetterDuplicates < 0 || (n.DeadLetterDuplicates > 0 && n.DeadLetterDuplicates < window) {
		v.add("nats.dead_letter_duplicates", "%s is shorter than nats.duplicates (%s); use at least that, or leave it out for the default (%s): "+
			"a message dead-lettered again after its Term was lost with its process is dropped only within this window", n.DeadLetterDuplicates, window, Duration(DefaultDeadLetterDuplicates))
	}
}

func validPort(s string) bool {
	p, err := strconv.Atoi(s)
	return err == nil && p >= 0 && p <= 65535
}

// natsName checks a stream or consumer name against what the NATS server
// accepts.
func natsName(v *validator, field, name, example string) {
	if name == "" {
		v.add(field, "required; e.g. %s", example)
		return
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(".*>/\\", r) {
			v.add(field, "%q contains %q; NATS rejects names with white space, \".\", \"*\", \">\", \"/\" or \"\\\"; use letters, digits, \"-\" and \"_\", e.g. %s", name, string(r), example)
			return
		}
	}
}

// subjectPrefix checks a subject prefix: dot-separated tokens without white
// space or wildcards.
func subjectPrefix(v *validator, field, prefix, example string) bool {
	if prefix == "" {
		v.add(field, "required; e.g. %s", example)
		return false
	}
	for _, tok := range strings.Split(prefix, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			v.add(field, "%q is not a subject prefix; write tokens separated by \".\", without white space, \"*\" or \">\", e.g. %s", prefix, example)
			return false
		}
	}
	return true
}

// subjectsOverlap reports whether a.> and b.> share subjects.
func subjectsOverlap(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".")
}

var (
	strategyList = "choose one of delete_insert, merge, append_dedupe"
	identRE      = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)
)

// maxIdentBytes is Postgres's NAMEDATALEN-1.
const maxIdentBytes = 63

func (c *Config) validateDataset(v *validator, names []string, name string, d *Dataset) {
	if !schemas.ValidDataset(name) {
		msg := fmt.Sprintf("%q is not a valid dataset name; use 1-63 lower-case letters, digits and _, starting with a letter (it becomes the subject token %s.<dataset>)", name, orDefault(c.NATS.SubjectPrefix, DefaultSubjectPrefix))
		if lower := strings.ToLower(name); lower != name && schemas.ValidDataset(lower) {
			msg += fmt.Sprintf(", e.g. %q", lower)
		}
		v.add("name", "%s", msg)
	}

	s := d.Strategy
	switch {
	case s == "":
		v.add("strategy", "required; %s", strategyList)
	case !s.Valid():
		msg := fmt.Sprintf("%q is not a strategy; %s", string(s), strategyList)
		if m := closest(string(s), []string{string(DeleteInsert), string(Merge), string(AppendDedupe)}); m != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", m)
		}
		v.add("strategy", "%s", msg)
	}
	known := s.Valid()
	// notApplicable reports a field set for a strategy that ignores it. The
	// switches below call it as a case, so a field that does not apply is
	// reported once and not checked further.
	notApplicable := func(field string, set bool, why string) bool {
		if known && set {
			v.add(field, "does not apply to strategy %s%s; remove it", s, why)
			return true
		}
		return false
	}

	if d.Target == "" {
		v.add("target", "required; name the table to load as schema.table, e.g. analytics.fact_orders")
	} else {
		qualifiedIdent(v, "target", d.Target, "schema.table")
	}

	c.validateSource(v, d)
	c.validateChecks(v, d)

	switch {
	case s == DeleteInsert && d.PartitionColumn == "":
		v.add("partition_column", "required for strategy delete_insert; name the target column that holds the partition key")
	case notApplicable("partition_column", s == Merge && d.PartitionColumn != "" && d.KeepVersions == 0, " (merge filters the source with @partition, not the target; with keep_versions it names the partition's rows)"):
	case d.PartitionColumn != "":
		ident(v, "partition_column", d.PartitionColumn)
	}
	if d.PartitionType != "" && !d.PartitionType.Valid() {
		v.add("partition_type", "%q is not a partition type; choose one of date (the default), timestamp (an hour) or text", string(d.PartitionType))
	}

	needsKey := s == Merge || s == AppendDedupe
	switch {
	case needsKey && len(d.Key) == 0:
		v.add("key", "required for strategy %s; list the columns that identify a row, e.g. key: [customer_id]", s)
	case notApplicable("key", s == DeleteInsert && len(d.Key) > 0, ", which replaces the whole partition"):
	default:
		seen := map[string]bool{}
		for _, k := range d.Key {
			if seen[k] {
				v.add("key", "%q is listed twice; list each key column once", k)
				continue
			}
			seen[k] = true
			ident(v, "key", k)
		}
	}

	if !notApplicable("version_column", s != Merge && d.VersionColumn != "", " (only merge compares versions)") && d.VersionColumn != "" {
		ident(v, "version_column", d.VersionColumn)
		if contains(d.Key, d.VersionColumn) {
			v.add("version_column", "%q is also in key; a version column changes with every version of a row, so it cannot identify the row: remove it from key or choose another version_column", d.VersionColumn)
		}
	}

	switch {
	case s == AppendDedupe && d.View == "":
		v.add("view", "required for strategy append_dedupe; name the view idem creates to keep the latest row per key, e.g. raw.latest_events")
	case notApplicable("view", s != AppendDedupe && d.View != "", " (only append_dedupe keeps a view)"):
	case d.View != "":
		qualifiedIdent(v, "view", d.View, "schema.view")
		if qualify(d.View) == qualify(d.Target) {
			schema, table := d.TargetTable()
			v.add("view", "same as target %q; the view needs a name of its own, e.g. %s.latest_%s", d.Target, schema, table)
		}
	}
	c.validateAppendColumns(v, d, notApplicable)
	notApplicable("truncate_partition", s != DeleteInsert && d.TruncatePartition, " (only delete_insert replaces a whole partition)")
	if d.OnSchemaChange != c.Defaults.OnSchemaChange { // the default's own problem is reported once
		validateSchemaPolicy(v, "on_schema_change", d.OnSchemaChange)
	}
	switch d.OnDefinitionChange {
	case "", DefinitionChangeNone, DefinitionChangeReload:
	default:
		v.add("on_definition_change", "%q; use %s or %s", d.OnDefinitionChange, DefinitionChangeNone, DefinitionChangeReload)
	}
	switch {
	case d.KeepVersions < 0 || d.KeepVersions > MaxKeepVersions:
		v.add("keep_versions", "%d; use 0 (keep none, the default) up to %d", d.KeepVersions, MaxKeepVersions)
	case d.KeepVersions > 0 && d.PartitionColumn == "":
		v.add("keep_versions", "needs partition_column: a version is the target's rows whose partition_column holds the partition")
	}
	validateExpect(v, d)
	c.validateWatch(v, d)
	validateRecheck(v, d)

	validateRetries(v, d)
	c.validateThen(v, names, name, d)
}

// validateSchemaPolicy checks an on_schema_change value.
func validateSchemaPolicy(v *validator, field, policy string) {
	if policy == "" || slices.Contains(strategies.SchemaPolicies(), policy) {
		return
	}
	msg := fmt.Sprintf("%q is not a policy; use %s", policy, strings.Join(strategies.SchemaPolicies(), ", "))
	if m := closest(policy, strategies.SchemaPolicies()); m != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", m)
	}
	v.add(field, "%s", msg)
}

// validateRetries checks the backoff and the per-load limits.
func validateRetries(v *validator, d *Dataset) {
	if d.Retries != nil && *d.Retries < 0 {
		v.add("retries", "%d; use 0 for no retry, or more (default %d)", *d.Retries, DefaultRetries)
	}
	if d.RetryDelay <= 0 {
		v.add("retry_delay", "%s; use a positive duration such as %s", d.RetryDelay, Duration(DefaultRetryDelay))
	}
	if d.MaxRetryDelay <= 0 {
		v.add("max_retry_delay", "%s; use a positive duration such as %s", d.MaxRetryDelay, Duration(DefaultMaxRetryDelay))
	} else if d.RetryDelay > 0 && d.MaxRetryDelay < d.RetryDelay {
		v.add("max_retry_delay", "%s is shorter than retry_delay %s; raise max_retry_delay or lower retry_delay", d.MaxRetryDelay, d.RetryDelay)
	}
	switch {
	case d.Timeout < 0:
		v.add("timeout", "%s; use a positive duration, or leave timeout out for no statement timeout", d.Timeout)
	case d.Timeout > 0 && d.Timeout < Duration(time.Millisecond):
		v.add("timeout", "%s is under 1ms; Postgres counts statement_timeout in milliseconds, and 0 turns it off: use at least 1ms", d.Timeout)
	}
	if d.MaxConcurrency < 0 {
		v.add("max_concurrency", "%d; use 0 for no per-dataset limit, or a positive number", d.MaxConcurrency)
	}
}

// validateSource checks the source: one kind; SQL present, clock-free and
// binding only the arguments idem passes; files and another PostgreSQL
// named in a way idem can reach.
func (c *Config) validateSource(v *validator, d *Dataset) {
	src := d.Source
	kinds := 0
	for _, set := range []bool{strings.TrimSpace(src.SQL) != "", src.Files != nil, src.Postgres != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds == 0:
		v.add("source", "required; write the SELECT that returns the partition's rows, filtered with @partition, or files: or postgres:")
		return
	case kinds > 1:
		v.add("source", "names %d sources; give one: a SELECT, files: or postgres:", kinds)
		return
	}
	if d.WaitUpTo < 0 || d.WaitUpTo > MaxWaitUpTo {
		v.add("wait_up_to", "%s; use a duration from 0 (the default, %s) up to %s", d.WaitUpTo, DefaultWaitUpTo, MaxWaitUpTo)
	}
	if d.ReadyWhen != "" && src.SQL == "" {
		v.add("ready_when", "goes with a SELECT source; files: has ready:, postgres: has max_replica_lag")
	}
	switch {
	case src.Files != nil:
		c.validateFiles(v, src.Files)
		return
	case src.Postgres != nil:
		if src.Postgres.URL == "" {
			v.add("source.postgres.url", "required; the source server's connection string (url, or url_file)")
		}
		if n := src.Postgres.RecoveryConflictRetries; n != nil && (*n < 0 || *n > 100) {
			v.add("source.postgres.recovery_conflict_retries", "%d; use 0 to 100", *n)
		}
		if src.Postgres.MaxReplicaLag < 0 {
			v.add("source.postgres.max_replica_lag", "%s; use a positive duration, or 0 for no gate", src.Postgres.MaxReplicaLag)
		}
		c.validateSourceSQL(v, d, "source.postgres.sql", src.Postgres.SQL)
		return
	}
	c.validateSourceSQL(v, d, "source", src.SQL)
	if d.ReadyWhen != "" {
		c.validateReadyWhen(v, d.ReadyWhen)
	}
}

// validateReadyWhen checks a ready_when query as a source is checked: one
// read, clock-free, binding only @partition and @run_id.
func (c *Config) validateReadyWhen(v *validator, sql string) {
	for _, f := range sqlcheck.WallClock(sql) {
		v.add("ready_when", "reads the wall clock with %s (byte %d), so whether an old partition is ready would depend on the day it is asked; use @partition instead", f.Name, f.Offset)
	}
	for _, p := range sqlcheck.Params(sql) {
		if p != "partition" && p != "run_id" {
			v.add("ready_when", "uses @%s, which idem does not bind; idem binds only @partition and @run_id", p)
		}
	}
	for _, f := range sqlcheck.NotARead(sql) {
		v.add("ready_when", "is more than one read: %s (byte %d); write one SELECT returning a boolean", f.Name, f.Offset)
	}
	if !sqlcheck.StartsWithSelect(sql) {
		v.add("ready_when", "is not a SELECT; write one SELECT returning a boolean, e.g. SELECT count(*) > 0 FROM staging.orders WHERE event_date = @partition")
	}
}

// validateFiles checks a files: source without reaching the store.
func (c *Config) validateFiles(v *validator, f *FilesSource) {
	switch {
	case strings.HasPrefix(f.URL, "s3://"):
		if strings.TrimPrefix(f.URL, "s3://") == "" || strings.HasPrefix(strings.TrimPrefix(f.URL, "s3://"), "/") {
			v.add("source.files.url", "%q names no bucket; write s3://BUCKET/path/dt={partition}/", f.URL)
		}
	case strings.HasPrefix(f.URL, "file:///"):
	default:
		v.add("source.files.url", "%q; write s3://BUCKET/path/dt={partition}/ or file:///path/dt={partition}/", f.URL)
	}
	if !strings.Contains(f.URL, "{partition") {
		v.add("source.files.url", "%q never names {partition}, so every partition would load the same files", f.URL)
	}
	switch f.Format {
	case "csv", "ndjson", "parquet":
	default:
		v.add("source.files.format", "%q; use csv, ndjson or parquet", f.Format)
	}
	if r := f.Ready; r != nil {
		rules := 0
		for _, set := range []bool{r.Marker != "", r.Manifest != "", r.QuietFor > 0} {
			if set {
				rules++
			}
		}
		if rules != 1 {
			v.add("source.files.ready", "give exactly one of marker, manifest or quiet_for (it has %d)", rules)
		}
		if r.MinFiles < 0 || r.MinFiles > 0 && r.QuietFor == 0 {
			v.add("source.files.ready.min_files", "%d; goes with quiet_for, 1 or more", r.MinFiles)
		}
	}
	for _, a := range f.Allow {
		if a != "uint64_as_bigint" && a != "naive_timestamp_as_utc" {
			v.add("source.files.allow", "%q; use uint64_as_bigint or naive_timestamp_as_utc", a)
		}
	}
}

// validateSourceSQL checks a source SELECT: clock-free and binding only
// @partition and @run_id, and using @partition where the strategy needs it.
func (c *Config) validateSourceSQL(v *validator, d *Dataset, field, sql string) {
	if strings.TrimSpace(sql) == "" {
		v.add(field, "required; write the SELECT that returns the partition's rows, filtered with @partition")
		return
	}
	for _, f := range sqlcheck.WallClock(sql) {
		v.add(field, "reads the wall clock with %s (byte %d), so a rerun or backfill of an old partition would load different rows; use @partition instead", f.Name, f.Offset)
	}
	usesPartition := false
	for _, p := range sqlcheck.Params(sql) {
		switch p {
		case "partition":
			usesPartition = true
		case "run_id":
		default:
			msg := fmt.Sprintf("uses @%s, which idem does not bind; idem binds only @partition and @run_id", p)
			if m := closest(p, []string{"partition", "run_id"}); m != "" {
				msg += fmt.Sprintf(" (did you mean @%s?)", m)
			}
			v.add(field, "%s", msg)
		}
	}
	if !usesPartition && (d.Strategy == DeleteInsert || d.Strategy == AppendDedupe && d.PartitionColumn != "") {
		v.add(field, "never uses @partition, so every partition would load the same rows; filter the source with @partition, e.g. WHERE event_date = @partition")
	}
}

// validateAppendColumns checks the columns idem fills for append_dedupe.
func (c *Config) validateAppendColumns(v *validator, d *Dataset, notApplicable func(string, bool, string) bool) {
	why := " (only append_dedupe adds these columns)"
	runID, runIDSet := orDefault(d.RunIDColumn, DefaultRunIDColumn), d.RunIDColumn != ""
	loadSeq, loadSeqSet := orDefault(d.LoadSeqColumn, DefaultLoadSeqColumn), d.LoadSeqColumn != ""
	na1 := notApplicable("run_id_column", d.Strategy != AppendDedupe && runIDSet, why)
	na2 := notApplicable("load_seq_column", d.Strategy != AppendDedupe && loadSeqSet, why)
	if d.Strategy != AppendDedupe || na1 || na2 {
		return
	}
	ident(v, "run_id_column", runID)
	ident(v, "load_seq_column", loadSeq)
	if runID == loadSeq {
		v.add("load_seq_column", "same as run_id_column (%q); they are two columns, run_id text and load_seq bigint: name them apart", runID)
	}
	for _, col := range []struct{ field, name string }{{"run_id_column", runID}, {"load_seq_column", loadSeq}} {
		if contains(d.Key, col.name) {
			v.add("key", "%q is the %s, which idem fills on every load, so it cannot identify a row; remove it from key", col.name, col.field)
		}
		if d.PartitionColumn == col.name {
			v.add("partition_column", "%q is the %s, which idem fills on every load; name the column that holds the partition key", col.name, col.field)
		}
	}
}

// ident checks one plain Postgres identifier.
func ident(v *validator, field, s string) {
	if msg := identProblem(s); msg != "" {
		v.add(field, "%s", msg)
	}
}

func identProblem(s string) string {
	switch lower := strings.ToLower(s); {
	case s == "":
		return "an empty name; write a lower-case Postgres identifier"
	case !identRE.MatchString(s) && identRE.MatchString(lower):
		return fmt.Sprintf("%q has upper-case letters; Postgres folds unquoted names to lower case, so write %q", s, lower)
	case !identRE.MatchString(s):
		return fmt.Sprintf("%q is not a plain Postgres identifier; use lower-case letters, digits, _ and $, starting with a letter or _", s)
	case len(s) > maxIdentBytes:
		return fmt.Sprintf("%q is %d bytes; Postgres silently truncates names to %d bytes, so idem would address a different name: shorten it", s, len(s), maxIdentBytes)
	}
	return ""
}

// qualifiedIdent checks schema.name (or name alone).
func qualifiedIdent(v *validator, field, s, form string) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		v.add(field, "%q has %d dot-separated parts; write %s", s, len(parts), form)
		return
	}
	for _, p := range parts {
		if msg := identProblem(p); msg != "" {
			v.add(field, "in %q: %s", s, msg)
		}
	}
	if len(parts) == 2 && parts[0] == "idem" {
		v.add(field, "%q is in schema idem, which holds idem's own audit tables; use another schema", s)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// closest returns the candidate within two edits of s, if any.
func closest(s string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// validBucket: JetStream key-value bucket names are [a-zA-Z0-9_-]+.
func validBucket(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// validateExpect checks the calendar and that it fits the partition type.
func validateExpect(v *validator, d *Dataset) {
	if d.Expect == nil {
		return
	}
	if _, err := d.Expect.calendar(); err != nil {
		v.add("expect", "%v", err)
		return
	}
	pt := d.PartitionType
	if pt == "" {
		pt = schemas.PartitionDate
	}
	want := map[schemas.PartitionType]string{schemas.PartitionDate: "day", schemas.PartitionHour: "hour"}[pt]
	switch {
	case want == "":
		v.add("expect", "a calendar needs date or timestamp partitions; partition_type %s has no calendar: remove expect", pt)
	case d.Expect.Every != want:
		v.add("expect", "every: %s does not fit partition_type %s; want every: %s", d.Expect.Every, pt, want)
	}
}
