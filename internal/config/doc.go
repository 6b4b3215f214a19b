// Package config reads, completes and checks the idem YAML configuration:
// the pipeline name, the NATS and Postgres connections, the HTTP endpoint and
// the datasets (docs/SPEC.md, datasets and strategies).
//
// It never connects to NATS or Postgres, never logs, and never prints a
// secret: use [Config.Redacted] to show a config.
//
// # Loading
//
// [Load] (or [Parse] for bytes) decodes the YAML strictly: an unknown key is
// an error naming its line, its path and the closest known key
// (line 9: datasets.orders.partiton_column: unknown key "partiton_column";
// did you mean "partition_column"?), and so is a value of the wrong type. Load then reads
// the secret files, applies the environment overrides and [Config.WithDefaults].
// It does not call [Config.Validate]: `idem validate` and start-up do, and
// report every [Problem] at once.
//
// Durations are Go duration strings: "500ms", "10s", "1m30s", "30m". A bare
// number is refused, since 10 could mean seconds or nanoseconds.
//
// # Environment
//
// Each variable, when set and not empty, overrides the YAML value:
//
//	IDEM_PIPELINE          pipeline
//	IDEM_NATS_URL          nats.url
//	IDEM_NATS_STREAM       nats.stream
//	IDEM_NATS_DLQ_STREAM   nats.dlq_stream
//	IDEM_NATS_CONSUMER     nats.consumer
//	IDEM_NATS_CREDS        nats.creds
//	IDEM_NATS_NKEY         nats.nkey
//	IDEM_NATS_USER         nats.user
//	IDEM_NATS_PASSWORD     nats.password
//	IDEM_NATS_TOKEN        nats.token
//	IDEM_DATABASE_URL      postgres.url
//	IDEM_HTTP_ADDR         http.addr
//	IDEM_HTTP_TOKEN        http.token
//
// # Secrets
//
// A secret can be written inline, come from the environment, or come from a
// file: nats.password_file, nats.token_file, postgres.url_file,
// http.token_file and lineage.openlineage.api_key_file are read at
// Load (a relative path is relative to the config file's folder; with Parse,
// to the working directory), with a trailing line break trimmed. A missing or
// empty file is an error naming the field, and so is setting both a value and
// its file. The environment wins over both. nats.creds, nats.nkey and the TLS
// files are paths handed to the NATS client, not read here.
//
// # Top level
//
//	pipeline   required    the audit table's dag_id
//	nats       see below
//	postgres   see below
//	http       see below
//	lineage    off         OpenLineage run events, see below
//	tracing    off         OpenTelemetry spans, see below
//	datasets   required    dataset name -> dataset; at least one
//
// # nats
//
//	url                  nats://127.0.0.1:4222   one URL or a comma-separated list
//	stream               IDEM_EVENTS             events stream
//	dlq_stream           IDEM_DLQ                dead-letter stream; not the events stream
//	consumer             idem                    durable pull consumer, shared by replicas
//	subject_prefix       idem.ready              events go to <prefix>.<dataset>; backfills to idem.backfill.<dataset> (last token replaced)
//	dlq_subject_prefix   idem.dlq                dead letters go to <prefix>.<dataset>
//	ack_wait             30s                     at least 1s, under duplicates; longer loads send heartbeats
//	duplicates           2m                      duplicate window of the streams idem creates; over 30s
//	dead_letter_duplicates 24h                   the dead-letter stream's; at least duplicates
//	fleet_bucket         idem_fleet_<consumer>   key-value bucket where replicas list the datasets they know
//	unknown_dataset_grace 5m                     how long an event for a dataset no live replica knows waits
//	max_in_flight        16                      load transactions running at once in one process
//	max_group            8                       events of one dataset a group load takes (1: off)
//	backfill_share       50                      percent of max_in_flight backfill events keep while live ones wait (1-100)
//	replicas             1                       replicas of the streams idem creates (1-5; 3 in production)
//	creds                                        path of a .creds file
//	nkey                                         path of an nkey seed file
//	user, password                               user name authentication
//	password_file                                file holding the password
//	token                                        token authentication
//	token_file                                   file holding the token
//	tls.ca                                       CA bundle verifying the server
//	tls.cert, tls.key                            client certificate and key (both or neither)
//	tls.insecure_skip_verify   false             tests only
//	results.stream       IDEM_RESULTS            every event's terminal outcome (idem publish --wait reads it)
//	results.subject_prefix idem.result           results go to <prefix>.<dataset>
//	results.max_age      7d                      how long a result is kept (at least 1m)
//	results.max_bytes    1073741824              the stream's size; the oldest results go first (at least 1 MiB)
//
// Stream and consumer names may not hold white space, ".", "*", ">", "/" or
// "\" (NATS rejects them), and the three subject prefixes must not overlap. Use
// at most one of creds, nkey, user/password and token.
//
// ack_wait must be shorter than duplicates, and duplicates longer than 30s:
// a dead letter can be published twice, after a Term lost once the dead
// letter was stored (the message comes back after ack_wait) or after the
// reconciler's lost ack (its advisory comes back after 30s), and the
// dead-letter stream drops the second only within its duplicate window.
// duplicates applies to the streams idem creates; an existing stream keeps
// its own. The dead-letter stream's window is dead_letter_duplicates, a day
// by default, since a message whose Term was lost with its process can come
// back long after, held through an outage; an existing dead-letter stream's
// shorter window is raised to it, never lowered.
//
// # postgres
//
//	url             a libpq URL or keyword/value string; TLS through sslmode and friends
//	url_file        file holding the URL
//	statement_mode  auto   how statements are sent: auto, prepare or describe
//
// statement_mode auto prepares named statements when idem talks to
// PostgreSQL itself, and sends unnamed statements (pgx's cache_describe)
// behind a pooler such as PgBouncer, which idem detects when it connects.
// prepare forces named statements (behind PgBouncer only from 1.21 with
// max_prepared_statements); describe forces unnamed ones. See
// docs/POOLERS.md.
//
// The URL is not required by Validate, so a config can be checked without a
// database.
//
// # http
//
//	addr         127.0.0.1:9464   host:port of the status page, /metrics, /healthz and /readyz
//	token        none             enables the status page's actions (replay, backfill); 16+ characters
//	token_file                    file holding the token
//	token_for_reads  false        the JSON API (/api/v1/) also needs the token, as Authorization: Bearer; needs token
//
// # audit
//
//	retention    90d              attempts kept in idem.pipeline_audit: a number of days (at least 7d), or forever (0)
//
// `idem serve` prunes older attempts once an hour, in small batches, one
// replica at a time. Each partition's latest attempt and latest success stay,
// and so does the ledger (idem.run_ledger), so `idem audit status`, `idem audit
// missing`, calendars, backfill plans and the status page answer the same.
// 90 days keep a quarter of history to investigate and bound the table: an
// hourly pipeline of 1,000 datasets keeps about 2.2M attempts.
//
// # lineage
//
// lineage: {openlineage: {url: http://marquez:5000}} makes every attempt
// emit OpenLineage run events (START, then COMPLETE, FAIL or ABORT),
// delivered through the outbox. Absent, none are sent.
//
//	openlineage.url            required   the backend's base URL, http:// or https://, without user information
//	openlineage.endpoint       api/v1/lineage   the API's path under url (OpenMetadata: api/v1/openlineage/lineage)
//	openlineage.namespace      the pipeline     job namespace of idem's runs; at most 512 printable characters
//	openlineage.api_key                   sent as Authorization: Bearer <key>; a secret
//	openlineage.api_key_file              file holding the key
//	openlineage.timeout        10s        bounds one event's POST; at most 5m
//
// # tracing
//
// tracing: {otlp: {endpoint: http://otel-collector:4318}} exports
// OpenTelemetry spans (receive, process with a span per statement, settle,
// publish). Absent, none are exported, though a traceparent that arrives on
// an event still reaches the events it triggers.
//
//	otlp.endpoint    required        host:port, or an http:// or https:// URL (http/protobuf: a URL without a path posts to /v1/traces)
//	otlp.protocol    http/protobuf   or grpc
//	otlp.insecure    false           no TLS to a host:port endpoint; a URL's scheme decides for itself
//	otlp.headers                     sent with every export; the values are secrets, redacted when printed
//	sample_ratio     1               share of the traces idem starts that are sampled, 0 to 1; needs otlp
//
// # datasets
//
// A dataset's name is its key under datasets: 1-63 lower-case letters, digits
// and _, starting with a letter; it is the last token of its subject.
// Identifiers (schemas, tables, views, columns) are plain lower-case Postgres
// identifiers, [a-z_][a-z0-9_$]*, of at most 63 bytes: Postgres folds
// unquoted names to lower case and silently truncates longer ones.
//
//	strategy          required        delete_insert, merge or append_dedupe
//	target            required        schema.table; a bare table is in public
//	source            required        SELECT with @partition and @run_id; never the clock
//	partition_column  see strategies  target column holding the partition key
//	partition_type    date            date, timestamp (an hour) or text
//	key               see strategies  columns identifying a row
//	version_column    merge only      newer (or equal) versions win
//	view              append_dedupe   schema.view keeping the latest row per key
//	run_id_column     run_id          append_dedupe only
//	load_seq_column   load_seq        append_dedupe only
//	then                              datasets to trigger after a successful load
//	retries           3               retries after a transient failure; 0 for none (loads that ran, not deliveries)
//	retry_delay       10s             first backoff delay
//	max_retry_delay   30m             backoff cap; at least retry_delay
//	timeout           none            statement timeout, at least 1ms
//	max_concurrency   0               per-process limit for this dataset; 0 for none
//	allow_empty       false           let an empty source partition load
//	truncate_partition false          delete_insert only: TRUNCATE the child holding the partition (see below)
//	expect            none            the calendar: which partitions should exist and by when (see below)
//
// A zero duration or count in YAML means the default.
//
// # Strategies
//
// Which fields a strategy takes; Validate reports a field set for a strategy
// that ignores it:
//
//	delete_insert   partition_column required; truncate_partition optional
//	merge           key required; version_column optional
//	append_dedupe   key and view required; partition_column, run_id_column
//	                and load_seq_column optional
//
// On a natively partitioned target whose child holds exactly the partition,
// delete_insert deletes the partition's rows and inserts straight into that
// child: readers never wait for it and never see the partition half loaded.
// truncate_partition: true truncates that child instead: no dead tuples, but
// a reader whose snapshot predates the load sees the partition empty, and the
// TRUNCATE takes ACCESS EXCLUSIVE on the child, waiting at most a few seconds
// for its readers before the load fails as transient and is retried. It needs
// TRUNCATE on each such child, which `idem validate` checks.
//
// # Calendars
//
// expect: {every: day, from: 2026-01-01, deadline: 3h, timezone: Europe/Paris}
//
//	every      required   day (partition_type date) or hour (timestamp)
//	from       required   the first expected partition: 2026-01-01, or 2026-01-01T00:00:00Z for hours
//	deadline   0          how long after its period ends a partition may be missing before it is late
//	timezone   UTC        IANA zone days are counted in; hours are always UTC
//
// A partition is expected once its period has ended; missing until its
// deadline, late after. text datasets have no calendar.
//
// # Validation
//
// [Config.Validate] returns [Problems], one [Problem] per finding with the
// dataset, the field and a message that says how to fix it, e.g.
//
//	dataset "orders": partition_column: required for strategy delete_insert; name the target column that holds the partition key
//
// Besides missing and misspelt fields it checks that a source neither reads
// the wall clock (CURRENT_DATE, now(), 'today'...) nor uses named arguments
// other than @partition and @run_id, and, for delete_insert, that it uses
// @partition; that keys hold no duplicates, the version column or idem's own
// columns; that then: names other declared datasets of the same partition
// type with no cycle (a -> b -> a); and the limits above.
package config
