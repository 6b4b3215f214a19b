package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestValidateProblems(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("c", 64)
	intp := func(i int) *int { return &i }

	tests := []struct {
		name    string
		mutate  func(c *Config)
		dataset string
		field   string
		want    []string // substrings of the message: what is wrong and the fix
		more    bool     // other problems may come with it
	}{
		// Top level.
		{"no pipeline", func(c *Config) { c.Pipeline = " " }, "", "pipeline", []string{"required", "IDEM_PIPELINE"}, false},
		{"no datasets", func(c *Config) { c.Datasets = nil }, "", "datasets", []string{"declare at least one dataset"}, false},
		{"results stream is the events stream", func(c *Config) { c.NATS.Results.Stream = c.NATS.Stream }, "", "nats.results.stream", []string{"already another of idem's streams", "IDEM_RESULTS"}, false},
		{"results prefix overlaps the events'", func(c *Config) { c.NATS.Results.SubjectPrefix = "idem.ready.results" }, "", "nats.results.subject_prefix", []string{"overlaps", "idem.result"}, false},
		{"results max_age under a minute", func(c *Config) { c.NATS.Results.MaxAge = Duration(time.Second) }, "", "nats.results.max_age", []string{"want at least 1m"}, false},
		{"results max_bytes under 1 MiB", func(c *Config) { c.NATS.Results.MaxBytes = 1000 }, "", "nats.results.max_bytes", []string{"at least 1048576"}, false},
		{"max_group negative", func(c *Config) { c.NATS.MaxGroup = -1 }, "", "nats.max_group", []string{"use 1 (group loads off) to 256"}, false},
		{"max_group too big", func(c *Config) { c.NATS.MaxGroup = 1000 }, "", "nats.max_group", []string{"use 1 (group loads off) to 256"}, false},
		{"token_for_reads without a token", func(c *Config) { c.HTTP.TokenForReads = true; c.HTTP.Token = "" }, "", "http.token_for_reads", []string{"needs http.token"}, false},
		{"ack_wait under 1s", func(c *Config) { c.NATS.AckWait = Duration(999 * time.Millisecond) }, "", "nats.ack_wait", []string{"999ms is too short", "at least 1s"}, false},
		{"unknown statement_mode", func(c *Config) { c.Postgres.StatementMode = "named" }, "", "postgres.statement_mode", []string{`"named"`, "use auto", "prepare or describe"}, false},
		{"reverify_window under a minute", func(c *Config) { c.Postgres.ReverifyWindow = Duration(10 * time.Second) }, "", "postgres.reverify_window", []string{"10s: want at least 1m", "postgres.reverify: false"}, false},
		{"ack_wait as long as the duplicate window", func(c *Config) { c.NATS.AckWait = Duration(2 * time.Minute) }, "", "nats.ack_wait", []string{"2m0s is not shorter than the duplicate window nats.duplicates (2m0s)", "Term is lost", "lower ack_wait or raise nats.duplicates"}, false},
		{"ack_wait beyond a set duplicate window", func(c *Config) {
			c.NATS.Duplicates = Duration(time.Minute)
			c.NATS.AckWait = Duration(90 * time.Second)
		}, "", "nats.ack_wait", []string{"1m30s is not shorter than the duplicate window nats.duplicates (1m0s)"}, false},
		{"duplicate window of 30s", func(c *Config) {
			c.NATS.Duplicates = Duration(30 * time.Second)
			c.NATS.AckWait = Duration(10 * time.Second)
		}, "", "nats.duplicates", []string{"30s is too short", "more than 30s", "advisory's ack is lost"}, false},
		{"negative duplicate window", func(c *Config) { c.NATS.Duplicates = Duration(-time.Minute) }, "", "nats.duplicates", []string{"use a positive duration such as 2m0s"}, false},
		{"max_in_flight zero", func(c *Config) { c.NATS.MaxInFlight = 0 }, "", "nats.max_in_flight", []string{"use at least 1"}, false},
		{"backfill_share above 100", func(c *Config) { c.NATS.BackfillShare = 101 }, "", "nats.backfill_share", []string{"101", "from 1 to 100", "default 50"}, false},
		{"backfill_share negative", func(c *Config) { c.NATS.BackfillShare = -5 }, "", "nats.backfill_share", []string{"from 1 to 100"}, false},
		{"subject prefix ending in backfill", func(c *Config) { c.NATS.SubjectPrefix = "idem.backfill" }, "", "nats.subject_prefix", []string{"backfills on idem.backfill.<dataset>", "another token than backfill"}, false},
		{"stream with space", func(c *Config) { c.NATS.Stream = "IDEM EVENTS" }, "", "nats.stream", []string{`contains " "`, "NATS rejects"}, false},
		{"stream with dot", func(c *Config) { c.NATS.Stream = "idem.events" }, "", "nats.stream", []string{`contains "."`}, false},
		{"dlq stream with star", func(c *Config) { c.NATS.DLQStream = "DLQ*" }, "", "nats.dlq_stream", []string{`contains "*"`}, false},
		{"consumer with gt", func(c *Config) { c.NATS.Consumer = "idem>" }, "", "nats.consumer", []string{`contains ">"`, "e.g. idem"}, false},
		{"empty consumer", func(c *Config) { c.NATS.Consumer = "" }, "", "nats.consumer", []string{"required"}, false},
		{"dlq stream equals stream", func(c *Config) { c.NATS.DLQStream = c.NATS.Stream }, "", "nats.dlq_stream", []string{"stream of their own"}, false},
		{"wildcard subject prefix", func(c *Config) { c.NATS.SubjectPrefix = "idem.>" }, "", "nats.subject_prefix", []string{"not a subject prefix"}, false},
		{"empty subject token", func(c *Config) { c.NATS.DLQSubjectPrefix = "idem..dlq" }, "", "nats.dlq_subject_prefix", []string{"not a subject prefix"}, false},
		{"overlapping prefixes", func(c *Config) { c.NATS.DLQSubjectPrefix = "idem.ready.dlq" }, "", "nats.dlq_subject_prefix", []string{"overlaps", "neither starts with the other"}, false},
		{"empty nats url", func(c *Config) { c.NATS.URL = "" }, "", "nats.url", []string{"IDEM_NATS_URL"}, false},
		{"two auth methods", func(c *Config) { c.NATS.Token = "t" }, "", "nats", []string{"user/password, token", "keep one"}, false},
		{"user without password", func(c *Config) { c.NATS.Password = "" }, "", "nats.password", []string{`user "loader" has no password`, "password_file"}, false},
		{"password without user", func(c *Config) { c.NATS.User = "" }, "", "nats.user", []string{"without a user"}, false},
		{"tls cert without key", func(c *Config) { c.NATS.TLS.Key = "" }, "", "nats.tls.key", []string{"needs both cert and key"}, false},
		{"bad http addr", func(c *Config) { c.HTTP.Addr = "localhost" }, "", "http.addr", []string{"not host:port"}, false},
		{"bad http port", func(c *Config) { c.HTTP.Addr = "localhost:http" }, "", "http.addr", []string{"not host:port"}, false},

		// lineage: and tracing:.
		{"openlineage without url", func(c *Config) {
			c.Lineage.OpenLineage = &OpenLineage{Namespace: "shop", Timeout: Duration(time.Second)}
		}, "", "lineage.openlineage.url", []string{"required", "http://marquez:5000"}, false},
		{"openlineage url without scheme", func(c *Config) { c.Lineage.OpenLineage = okLineage("marquez:5000") }, "", "lineage.openlineage.url", []string{"not an http:// or https:// URL"}, false},
		{"openlineage url with a password", func(c *Config) { c.Lineage.OpenLineage = okLineage("http://u:Secret-Pa55@marquez:5000") }, "", "lineage.openlineage.url", []string{"api_key or api_key_file"}, false},
		{"openlineage endpoint is a url", func(c *Config) {
			c.Lineage.OpenLineage = okLineage("http://marquez:5000")
			c.Lineage.OpenLineage.Endpoint = "http://other/api/v1/lineage"
		}, "", "lineage.openlineage.endpoint", []string{"not a path", "api/v1/lineage"}, false},
		{"openlineage empty namespace", func(c *Config) {
			c.Lineage.OpenLineage = okLineage("http://marquez:5000")
			c.Lineage.OpenLineage.Namespace = " "
		}, "", "lineage.openlineage.namespace", []string{"required"}, false},
		{"openlineage namespace with a newline", func(c *Config) {
			c.Lineage.OpenLineage = okLineage("http://marquez:5000")
			c.Lineage.OpenLineage.Namespace = "shop\nprod"
		}, "", "lineage.openlineage.namespace", []string{"control character"}, false},
		{"openlineage long namespace", func(c *Config) {
			c.Lineage.OpenLineage = okLineage("http://marquez:5000")
			c.Lineage.OpenLineage.Namespace = strings.Repeat("n", 513)
		}, "", "lineage.openlineage.namespace", []string{"513 characters", "at most 512"}, false},
		{"openlineage timeout too long", func(c *Config) {
			c.Lineage.OpenLineage = okLineage("http://marquez:5000")
			c.Lineage.OpenLineage.Timeout = Duration(time.Hour)
		}, "", "lineage.openlineage.timeout", []string{"up to 5m"}, false},
		{"openlineage api key with a line break", func(c *Config) {
			c.Lineage.OpenLineage = okLineage("http://marquez:5000")
			c.Lineage.OpenLineage.APIKey = "key\r\nX-Injected: 1"
		}, "", "lineage.openlineage.api_key", []string{"line break"}, false},
		{"otlp without endpoint", func(c *Config) { c.Tracing = Tracing{OTLP: &OTLP{Protocol: "grpc"}, SampleRatio: ptr(1.0)} }, "", "tracing.otlp.endpoint", []string{"required", "otel-collector:4317"}, false},
		{"otlp endpoint neither", func(c *Config) {
			c.Tracing = Tracing{OTLP: &OTLP{Endpoint: "otel-collector", Protocol: "grpc"}, SampleRatio: ptr(1.0)}
		}, "", "tracing.otlp.endpoint", []string{"neither host:port nor a URL"}, false},
		{"otlp endpoint bad scheme", func(c *Config) {
			c.Tracing = Tracing{OTLP: &OTLP{Endpoint: "grpc://otel-collector:4317", Protocol: "grpc"}, SampleRatio: ptr(1.0)}
		}, "", "tracing.otlp.endpoint", []string{"not an http:// or https:// URL"}, false},
		{"otlp insecure https", func(c *Config) {
			c.Tracing = Tracing{OTLP: &OTLP{Endpoint: "https://otel-collector:4318", Protocol: "http/protobuf", Insecure: true}, SampleRatio: ptr(1.0)}
		}, "", "tracing.otlp.insecure", []string{"contradicts the https:// endpoint"}, false},
		{"otlp protocol http", func(c *Config) {
			c.Tracing = Tracing{OTLP: &OTLP{Endpoint: "otel-collector:4318", Protocol: "http"}, SampleRatio: ptr(1.0)}
		}, "", "tracing.otlp.protocol", []string{"did you mean http/protobuf?"}, false},
		{"otlp protocol unknown", func(c *Config) {
			c.Tracing = Tracing{OTLP: &OTLP{Endpoint: "otel-collector:4318", Protocol: "thrift"}, SampleRatio: ptr(1.0)}
		}, "", "tracing.otlp.protocol", []string{"choose http/protobuf or grpc"}, false},
		{"otlp bad header name", func(c *Config) {
			c.Tracing = Tracing{OTLP: &OTLP{Endpoint: "otel-collector:4318", Protocol: "grpc", Headers: map[string]string{"api key": "k"}}, SampleRatio: ptr(1.0)}
		}, "", "tracing.otlp.headers", []string{`"api key" is not an HTTP header name`}, false},
		{"otlp header value with a line break", func(c *Config) {
			c.Tracing = Tracing{OTLP: &OTLP{Endpoint: "otel-collector:4318", Protocol: "grpc", Headers: map[string]string{"x-key": "a\nb"}}, SampleRatio: ptr(1.0)}
		}, "", "tracing.otlp.headers", []string{"line break"}, false},
		{"sample ratio above one", func(c *Config) {
			c.Tracing = Tracing{OTLP: &OTLP{Endpoint: "otel-collector:4317", Protocol: "grpc"}, SampleRatio: ptr(1.5)}
		}, "", "tracing.sample_ratio", []string{"1.5: want a share from 0"}, false},
		{"sample ratio without otlp", func(c *Config) { c.Tracing = Tracing{SampleRatio: ptr(0.5)} }, "", "tracing.sample_ratio", []string{"no effect without tracing.otlp"}, false},

		// Dataset names and strategies.
		{"dataset name upper case", func(c *Config) { c.Datasets["Orders"] = c.Datasets["orders"]; delete(c.Datasets, "orders") }, "Orders", "name", []string{"not a valid dataset name", `e.g. "orders"`, "idem.ready.<dataset>"}, false},
		{"dataset name with dash", func(c *Config) { c.Datasets["daily-x"] = c.Datasets["hourly"]; delete(c.Datasets, "hourly") }, "daily-x", "name", []string{"lower-case letters, digits and _"}, false},
		{"no strategy", func(c *Config) { c.Datasets["orders"].Strategy = "" }, "orders", "strategy", []string{"required", "delete_insert, merge, append_dedupe"}, false},
		// Checks: hostile SQL is refused before anything runs, the field named.
		{"check sql reads the clock", func(c *Config) {
			c.Datasets["orders"].Checks = []Check{{SQL: "SELECT id FROM t WHERE d < now()"}}
		}, "orders", "checks[0].sql", []string{"reads the wall clock with now()"}, false},
		{"check sql deletes", func(c *Config) {
			c.Datasets["orders"].Checks = []Check{{SQL: "WITH d AS (DELETE FROM t RETURNING id) SELECT id FROM d"}}
		}, "orders", "checks[0].sql", []string{"DELETE (a write, DDL or locking keyword)", "a check only reads"}, false},
		{"check sql with a second statement", func(c *Config) {
			c.Datasets["orders"].Checks = []Check{{SQL: "SELECT 1; DROP TABLE t"}}
		}, "orders", "checks[0].sql", []string{"a semicolon (one statement only)"}, true},
		{"check expression is a writing subquery", func(c *Config) {
			c.Datasets["orders"].Checks = []Check{{Expression: "(SELECT count(*) FROM (INSERT INTO x VALUES (1) RETURNING 1) i) > 0"}}
		}, "orders", "checks[0].expression", []string{"INSERT (a write, DDL or locking keyword)"}, false},
		{"check column with quotes", func(c *Config) {
			c.Datasets["orders"].Checks = []Check{{NotNull: []string{`id" OR 1=1 --`}}}
		}, "orders", "checks[0].not_null", []string{"is not a plain Postgres identifier"}, false},
		{"check with two kinds", func(c *Config) {
			c.Datasets["orders"].Checks = []Check{{NotNull: []string{"id"}, Unique: []string{"id"}}}
		}, "orders", "checks[0]", []string{"sets unique and not_null at once"}, false},
		{"check unknown severity", func(c *Config) {
			c.Datasets["orders"].Checks = []Check{{NotNull: []string{"id"}, Severity: "fatal"}}
		}, "orders", "checks[0].severity", []string{`"fatal"; use error`}, false},
		{"unknown strategy", func(c *Config) { c.Datasets["orders"].Strategy = "upsert" }, "orders", "strategy", []string{`"upsert" is not a strategy`, "choose one of delete_insert, merge, append_dedupe"}, false},
		{"misspelt strategy", func(c *Config) { c.Datasets["customers"].Strategy = "merg" }, "customers", "strategy", []string{`did you mean "merge"?`}, false},

		// Required per strategy.
		{"no target", func(c *Config) { c.Datasets["orders"].Target = "" }, "orders", "target", []string{"required", "schema.table"}, false},
		{"no source", func(c *Config) { c.Datasets["orders"].Source.SQL = "\n" }, "orders", "source", []string{"required", "@partition"}, false},
		{"delete_insert without partition_column", func(c *Config) { c.Datasets["orders"].PartitionColumn = "" }, "orders", "partition_column", []string{"required for strategy delete_insert; name the target column that holds the partition key"}, false},
		{"merge without key", func(c *Config) { c.Datasets["customers"].Key = nil; c.Datasets["customers"].VersionColumn = "" }, "customers", "key", []string{"required for strategy merge", "key: [customer_id]"}, false},
		{"append_dedupe without key", func(c *Config) { c.Datasets["events"].Key = nil }, "events", "key", []string{"required for strategy append_dedupe"}, false},
		{"append_dedupe without view", func(c *Config) { c.Datasets["events"].View = "" }, "events", "view", []string{"required for strategy append_dedupe", "raw.latest_events"}, false},

		// Fields that do not apply.
		{"version_column on delete_insert", func(c *Config) { c.Datasets["orders"].VersionColumn = "v" }, "orders", "version_column", []string{"does not apply to strategy delete_insert", "remove it"}, false},
		{"key on delete_insert", func(c *Config) { c.Datasets["orders"].Key = []string{"id"} }, "orders", "key", []string{"does not apply to strategy delete_insert", "remove it"}, false},
		{"view on merge", func(c *Config) { c.Datasets["customers"].View = "a.v" }, "customers", "view", []string{"does not apply to strategy merge"}, false},
		{"partition_column on merge", func(c *Config) { c.Datasets["customers"].PartitionColumn = "d" }, "customers", "partition_column", []string{"does not apply to strategy merge"}, false},
		{"run_id_column on delete_insert", func(c *Config) { c.Datasets["orders"].RunIDColumn = "run_id" }, "orders", "run_id_column", []string{"does not apply to strategy delete_insert"}, false},
		{"load_seq_column on merge", func(c *Config) { c.Datasets["customers"].LoadSeqColumn = "seq" }, "customers", "load_seq_column", []string{"does not apply to strategy merge"}, false},
		{"version_column on append_dedupe", func(c *Config) { c.Datasets["events"].VersionColumn = "v" }, "events", "version_column", []string{"only merge compares versions"}, false},

		// Identifiers.
		{"upper-case table", func(c *Config) { c.Datasets["orders"].Target = "analytics.FactOrders" }, "orders", "target", []string{"upper-case", "Postgres folds unquoted names to lower case", `write "factorders"`}, false},
		{"upper-case schema", func(c *Config) { c.Datasets["orders"].Target = "Analytics.fact_orders" }, "orders", "target", []string{`"Analytics" has upper-case letters`}, false},
		{"upper-case column", func(c *Config) { c.Datasets["orders"].PartitionColumn = "eventDate" }, "orders", "partition_column", []string{`write "eventdate"`}, false},
		{"quoted name", func(c *Config) { c.Datasets["orders"].Target = `analytics."fact orders"` }, "orders", "target", []string{"not a plain Postgres identifier"}, false},
		{"three-part name", func(c *Config) { c.Datasets["orders"].Target = "db.analytics.fact_orders" }, "orders", "target", []string{"3 dot-separated parts", "schema.table"}, false},
		{"empty schema", func(c *Config) { c.Datasets["orders"].Target = ".fact_orders" }, "orders", "target", []string{"empty name"}, false},
		{"digit first", func(c *Config) { c.Datasets["events"].Key = []string{"1id"} }, "events", "key", []string{`"1id" is not a plain Postgres identifier`}, false},
		{"64-byte column", func(c *Config) { c.Datasets["orders"].PartitionColumn = long }, "orders", "partition_column", []string{"64 bytes", "silently truncates", "63 bytes"}, false},
		{"64-byte view", func(c *Config) { c.Datasets["events"].View = "raw." + long }, "events", "view", []string{"silently truncates"}, false},
		{"long multibyte table", func(c *Config) { c.Datasets["orders"].Target = "a." + strings.Repeat("é", 32) }, "orders", "target", []string{"not a plain Postgres identifier"}, false},
		{"target in idem schema", func(c *Config) { c.Datasets["orders"].Target = "idem.orders" }, "orders", "target", []string{"schema idem"}, false},

		// Consistency inside a dataset.
		{"duplicate key column", func(c *Config) { c.Datasets["hourly"].Key = []string{"hour", "region", "hour"} }, "hourly", "key", []string{`"hour" is listed twice`}, false},
		{"version_column in key", func(c *Config) { c.Datasets["customers"].Key = []string{"customer_id", "updated_at"} }, "customers", "version_column", []string{"also in key", "remove it from key"}, false},
		{"run_id equals load_seq", func(c *Config) { c.Datasets["events"].LoadSeqColumn = "loaded_by" }, "events", "load_seq_column", []string{"same as run_id_column", "name them apart"}, false},
		{"default run_id equals load_seq", func(c *Config) {
			c.Datasets["events"].RunIDColumn = ""
			c.Datasets["events"].LoadSeqColumn = "run_id"
		}, "events", "load_seq_column", []string{`same as run_id_column ("run_id")`}, false},
		{"run_id column in key", func(c *Config) { c.Datasets["events"].Key = []string{"event_id", "loaded_by"} }, "events", "key", []string{"is the run_id_column", "remove it from key"}, false},
		{"view equal to target", func(c *Config) { c.Datasets["events"].View = "raw.events" }, "events", "view", []string{"same as target", "raw.latest_events"}, false},
		{"bare view equal to bare target", func(c *Config) {
			c.Datasets["events"].Target = "events"
			c.Datasets["events"].View = "public.events"
		}, "events", "view", []string{"same as target"}, false},
		{"unknown partition_type", func(c *Config) { c.Datasets["orders"].PartitionType = "hour" }, "orders", "partition_type", []string{`"hour" is not a partition type`, "date (the default), timestamp (an hour) or text"}, false},

		// Source SQL.
		{"source reads now()", func(c *Config) {
			c.Datasets["customers"].Source.SQL = "SELECT * FROM staging.customers WHERE updated_at > now() - interval '1 day'"
		}, "customers", "source", []string{"reads the wall clock with now()", "use @partition instead"}, false},
		{"source reads CURRENT_DATE", func(c *Config) {
			c.Datasets["orders"].Source.SQL = "SELECT * FROM s WHERE d = @partition AND d <= CURRENT_DATE"
		}, "orders", "source", []string{"reads the wall clock with CURRENT_DATE", "use @partition instead"}, false},
		{"two sources", func(c *Config) {
			c.Datasets["customers"].Source.Files = &FilesSource{URL: "s3://b/c/dt={partition}/", Format: "csv"}
		}, "customers", "source", []string{"names 2 sources", "give one"}, false},
		{"files url of another scheme", func(c *Config) {
			c.Datasets["customers"].Source = Source{Files: &FilesSource{URL: "http://b/c/{partition}/", Format: "csv"}}
		}, "customers", "source.files.url", []string{"write s3://BUCKET/path/dt={partition}/"}, false},
		{"files url without the partition", func(c *Config) {
			c.Datasets["customers"].Source = Source{Files: &FilesSource{URL: "s3://b/c/", Format: "csv"}}
		}, "customers", "source.files.url", []string{"never names {partition}"}, false},
		{"files of an unknown format", func(c *Config) {
			c.Datasets["customers"].Source = Source{Files: &FilesSource{URL: "file:///l/{partition}/", Format: "xlsx"}}
		}, "customers", "source.files.format", []string{`"xlsx"`, "csv, ndjson or parquet"}, false},
		{"two ready rules", func(c *Config) {
			c.Datasets["customers"].Source = Source{Files: &FilesSource{URL: "file:///l/{partition}/", Format: "csv",
				Ready: &FilesReady{Marker: "_SUCCESS", QuietFor: Duration(time.Minute)}}}
		}, "customers", "source.files.ready", []string{"exactly one of marker, manifest or quiet_for"}, false},
		{"wait_up_to past the limit", func(c *Config) {
			c.Datasets["customers"].Source = Source{Files: &FilesSource{URL: "file:///l/{partition}/", Format: "csv"}}
			c.Datasets["customers"].WaitUpTo = Duration(48 * time.Hour)
		}, "customers", "wait_up_to", []string{"up to 12h"}, false},
		{"ready_when reading the clock", func(c *Config) {
			c.Datasets["orders"].ReadyWhen = "SELECT max(loaded_at) > now() - interval '1 hour' FROM staging.loads WHERE d = @partition"
		}, "orders", "ready_when", []string{"reads the wall clock with now()"}, false},
		{"ready_when that writes", func(c *Config) {
			c.Datasets["orders"].ReadyWhen = "SELECT nextval('staging.ticks') > 0"
		}, "orders", "ready_when", []string{"more than one read", "nextval"}, false},
		{"ready_when that is no SELECT", func(c *Config) {
			c.Datasets["orders"].ReadyWhen = "VALUES (true)"
		}, "orders", "ready_when", []string{"is not a SELECT"}, false},
		{"ready_when with an unknown argument", func(c *Config) {
			c.Datasets["orders"].ReadyWhen = "SELECT count(*) > 0 FROM s WHERE d = @day"
		}, "orders", "ready_when", []string{"uses @day"}, false},
		{"ready_when on files", func(c *Config) {
			c.Datasets["customers"].Source = Source{Files: &FilesSource{URL: "file:///l/{partition}/", Format: "csv"}}
			c.Datasets["customers"].ReadyWhen = "SELECT true"
		}, "customers", "ready_when", []string{"goes with a SELECT source", "files: has ready:"}, false},
		{"recheck without a window", func(c *Config) {
			c.Datasets["orders"].Recheck = &Recheck{Every: Duration(time.Hour)}
		}, "orders", "recheck.window", []string{"use a duration such as 7d"}, false},
		{"recheck every too short", func(c *Config) {
			c.Datasets["orders"].Recheck = &Recheck{Window: Duration(7 * 24 * time.Hour), Every: Duration(time.Millisecond)}
		}, "orders", "recheck.every", []string{"use at least 1s"}, false},
		{"recheck fingerprint reading the clock", func(c *Config) {
			c.Datasets["orders"].Recheck = &Recheck{Window: Duration(7 * 24 * time.Hour), Every: Duration(time.Hour),
				Fingerprint: "SELECT count(*) FROM staging.orders WHERE updated_at > now() - interval '1 day'"}
		}, "orders", "recheck.fingerprint", []string{"reads the wall clock with now()"}, false},
		{"recheck fingerprint binding @run_id", func(c *Config) {
			c.Datasets["orders"].Recheck = &Recheck{Window: Duration(7 * 24 * time.Hour), Every: Duration(time.Hour),
				Fingerprint: "SELECT count(*) FROM staging.orders WHERE r = @run_id"}
		}, "orders", "recheck.fingerprint", []string{"uses @run_id", "binds only @partition"}, false},
		{"recheck fingerprint that is no SELECT", func(c *Config) {
			c.Datasets["orders"].Recheck = &Recheck{Window: Duration(7 * 24 * time.Hour), Every: Duration(time.Hour), Fingerprint: "VALUES (1)"}
		}, "orders", "recheck.fingerprint", []string{"is not a SELECT"}, false},
		{"recheck fingerprint on files", func(c *Config) {
			c.Datasets["customers"].Source = Source{Files: &FilesSource{URL: "file:///l/{partition}/", Format: "csv"}}
			c.Datasets["customers"].Recheck = &Recheck{Window: Duration(7 * 24 * time.Hour), Every: Duration(time.Hour), Fingerprint: "SELECT 1"}
		}, "customers", "recheck.fingerprint", []string{"fingerprinted by its listing"}, false},
		{"recheck of text partitions", func(c *Config) {
			c.Datasets["orders"].PartitionType = "text"
			c.Datasets["orders"].Recheck = &Recheck{Window: Duration(7 * 24 * time.Hour), Every: Duration(time.Hour)}
		}, "orders", "recheck", []string{"needs date or timestamp partitions"}, false},
		{"postgres source without a url", func(c *Config) {
			c.Datasets["customers"].Source = Source{Postgres: &PostgresSource{SQL: "SELECT * FROM o WHERE d = @partition"}}
		}, "customers", "source.postgres.url", []string{"required"}, false},
		{"postgres source reading the clock", func(c *Config) {
			c.Datasets["customers"].Source = Source{Postgres: &PostgresSource{URL: "postgres://h/db", SQL: "SELECT * FROM o WHERE d = @partition AND t < now()"}}
		}, "customers", "source.postgres.sql", []string{"reads the wall clock with now()"}, false},
		{"source reads 'today'", func(c *Config) { c.Datasets["customers"].Source.SQL = "SELECT * FROM s WHERE d = 'today'::date" }, "customers", "source", []string{"with 'today'"}, false},
		{"source with unknown argument", func(c *Config) {
			c.Datasets["orders"].Source.SQL = "SELECT * FROM s WHERE d = @partition AND r = @region"
		}, "orders", "source", []string{"uses @region", "only @partition and @run_id"}, false},
		{"source with misspelt argument", func(c *Config) { c.Datasets["customers"].Source.SQL = "SELECT * FROM s WHERE d = @partiton" }, "customers", "source", []string{"uses @partiton", "did you mean @partition?"}, false},
		{"delete_insert source without @partition", func(c *Config) { c.Datasets["orders"].Source.SQL = "SELECT * FROM staging.orders" }, "orders", "source", []string{"never uses @partition", "filter the source with @partition"}, false},

		// Retries and limits.
		{"negative retries", func(c *Config) { c.Datasets["orders"].Retries = intp(-1) }, "orders", "retries", []string{"use 0 for no retry"}, false},
		{"zero retry_delay", func(c *Config) { c.Datasets["orders"].RetryDelay = 0 }, "orders", "retry_delay", []string{"positive duration"}, false},
		{"negative max_retry_delay", func(c *Config) { c.Datasets["orders"].MaxRetryDelay = Duration(-time.Second) }, "orders", "max_retry_delay", []string{"positive duration"}, false},
		{"max_retry_delay below retry_delay", func(c *Config) { c.Datasets["orders"].MaxRetryDelay = Duration(time.Second) }, "orders", "max_retry_delay", []string{"shorter than retry_delay 5s", "raise max_retry_delay"}, false},
		{"negative timeout", func(c *Config) { c.Datasets["orders"].Timeout = Duration(-time.Minute) }, "orders", "timeout", []string{"leave timeout out"}, false},
		{"sub-millisecond timeout", func(c *Config) { c.Datasets["orders"].Timeout = Duration(time.Microsecond) }, "orders", "timeout", []string{"milliseconds"}, false},
		{"negative max_concurrency", func(c *Config) { c.Datasets["orders"].MaxConcurrency = -2 }, "orders", "max_concurrency", []string{"use 0 for no per-dataset limit"}, false},

		// then:.
		{"then unknown dataset", func(c *Config) { c.Datasets["events"].Then = []string{"daily_revenu"} }, "events", "then", []string{`"daily_revenu" is not a dataset`, `did you mean "daily_revenue"?`}, false},
		{"then itself", func(c *Config) { c.Datasets["orders"].Then = []string{"orders"} }, "orders", "then", []string{"names the dataset itself", "remove it"}, false},
		{"then twice", func(c *Config) { c.Datasets["events"].Then = []string{"daily_revenue", "daily_revenue"} }, "events", "then", []string{"listed twice"}, false},
		{"then partition_type differs", func(c *Config) { c.Datasets["orders"].Then = []string{"hourly"} }, "orders", "then", []string{`"hourly" has partition_type timestamp but "orders" has date`, "same partition_type"}, false},
		{"then cycle of two", func(c *Config) { c.Datasets["daily_revenue"].Then = []string{"events"} }, "daily_revenue", "then", []string{"cycle daily_revenue -> events -> daily_revenue", "remove one of these then: entries"}, false},
		{"then cycle of three", func(c *Config) {
			c.Datasets["orders"].Then = []string{"customers"}
			c.Datasets["customers"].Then = []string{"daily_revenue"}
			c.Datasets["daily_revenue"].Then = []string{"orders"}
		}, "customers", "then", []string{"cycle customers -> daily_revenue -> orders -> customers"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := parseSpec(t)
			tt.mutate(c)
			err := c.Validate()
			require.Error(t, err)
			problems := err.(Problems)
			if !tt.more {
				require.Len(t, problems, 1, "%v", problems)
			}
			var found *Problem
			for i, p := range problems {
				if p.Dataset == tt.dataset && p.Field == tt.field {
					found = &problems[i]
					break
				}
			}
			require.NotNil(t, found, "no problem for dataset %q field %q in:\n%v", tt.dataset, tt.field, problems)
			for _, w := range tt.want {
				require.Contains(t, found.Message, w)
			}
			if tt.dataset != "" {
				require.True(t, strings.HasPrefix(found.String(), `dataset "`+tt.dataset+`": `+tt.field+": "), found.String())
			}
		})
	}
}

func TestValidateCycleReportedOnce(t *testing.T) {
	t.Parallel()
	c := parseSpec(t)
	c.Datasets["orders"].Then = []string{"daily_revenue"}
	c.Datasets["daily_revenue"].Then = []string{"orders", "events"}
	c.Datasets["events"].Then = []string{"daily_revenue"}
	err := c.Validate()
	require.Error(t, err)
	require.Equal(t, 1, strings.Count(err.Error(), "cycle"), err.Error())
	require.Contains(t, err.Error(), `dataset "daily_revenue": then: cycle daily_revenue -> events -> daily_revenue`)
}

func TestDuplicateWindow(t *testing.T) {
	t.Parallel()
	c := parseSpec(t)
	require.Zero(t, c.NATS.Duplicates, "left out of the YAML")
	require.Equal(t, DefaultDuplicates, c.NATS.DuplicateWindow())
	c.NATS.Duplicates, c.NATS.AckWait = Duration(10*time.Minute), Duration(5*time.Minute)
	require.NoError(t, c.Validate(), "a longer window allows a longer ack_wait")
	require.Equal(t, 10*time.Minute, c.NATS.DuplicateWindow())
}

func TestDeadLetterWindow(t *testing.T) {
	t.Parallel()
	c := parseSpec(t)
	require.Equal(t, 24*time.Hour, c.NATS.DeadLetterWindow(), "a day by default")
	c.NATS.Duplicates = Duration(48 * time.Hour)
	require.Equal(t, 48*time.Hour, c.NATS.DeadLetterWindow(), "never shorter than the events stream's")
	c.NATS.DeadLetterDuplicates = Duration(time.Hour)
	err := c.Validate()
	require.ErrorContains(t, err, "nats.dead_letter_duplicates: 1h0m0s is shorter than nats.duplicates (48h0m0s)")
	c.NATS.Duplicates = 0
	require.NoError(t, c.Validate())
	require.Equal(t, time.Hour, c.NATS.DeadLetterWindow())
}

func TestReplicasRange(t *testing.T) {
	base := "pipeline: p\nnats:\n  replicas: %d\ndatasets:\n  orders:\n    strategy: delete_insert\n    target: a.b\n    partition_column: d\n    source: SELECT * FROM s.t WHERE d = @partition\n"
	for n, ok := range map[int]bool{0: true, 1: true, 3: true, 5: true, 6: false, -1: false} {
		cfg, err := Parse([]byte(fmt.Sprintf(base, n)), nil)
		if err != nil {
			t.Fatalf("replicas %d: %v", n, err)
		}
		err = cfg.Validate()
		if ok && err != nil {
			t.Errorf("replicas %d: unexpected %v", n, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "nats.replicas")) {
			t.Errorf("replicas %d: want a nats.replicas problem, got %v", n, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func okLineage(url string) *OpenLineage {
	return &OpenLineage{URL: url, Endpoint: DefaultOpenLineageEndpoint, Namespace: "shop", Timeout: Duration(DefaultOpenLineageTimeout)}
}
