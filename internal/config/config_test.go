package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/schemas"
)

// specYAML is the README's configuration example, plus the daily_revenue dataset its
// then: names, plus every optional field.
const specYAML = `
pipeline: shop                      # audit dag_id
nats:
  url: nats://127.0.0.1:4222
  stream: IDEM_EVENTS
  dlq_stream: IDEM_DLQ
  consumer: idem
  subject_prefix: idem.ready
  dlq_subject_prefix: idem.dlq
  ack_wait: 30s
  max_in_flight: 16
  user: loader
  password: n4ts-pa55
  tls:
    ca: /etc/idem/ca.pem
    cert: /etc/idem/client.pem
    key: /etc/idem/client-key.pem
    insecure_skip_verify: false
postgres:
  url: postgres://idem@127.0.0.1:5432/warehouse
http:
  addr: 127.0.0.1:9464
datasets:
  orders:
    strategy: delete_insert
    target: analytics.fact_orders
    partition_column: event_date
    source: SELECT * FROM staging.orders WHERE event_date = @partition
    retries: 5
    retry_delay: 5s
    max_retry_delay: 10m
    timeout: 15m
    max_concurrency: 2
    allow_empty: true
  customers:
    strategy: merge
    target: analytics.dim_customers
    key: [customer_id]
    version_column: updated_at      # optional: newer wins, stale replays never overwrite
    source: SELECT * FROM staging.customers WHERE updated_at::date = @partition
    retries: 0
  events:
    strategy: append_dedupe
    target: raw.events
    key: [event_id]
    view: raw.latest_events
    partition_column: event_date
    run_id_column: loaded_by
    load_seq_column: load_no
    source: |
      SELECT *, @run_id AS origin FROM staging.events
      WHERE event_date = @partition -- never CURRENT_DATE
    then: [daily_revenue]
  daily_revenue:
    strategy: delete_insert
    target: mart.daily_revenue
    partition_column: day
    partition_type: date
    source: SELECT @partition::date AS day, sum(amount) FROM raw.latest_events WHERE event_date = @partition
  hourly:
    strategy: merge
    target: hourly_stats
    partition_type: timestamp
    key: [hour, region]
    source: SELECT * FROM staging.hourly WHERE hour = @partition::timestamptz
`

func parseSpec(t *testing.T) *Config {
	t.Helper()
	c, err := Parse([]byte(specYAML), nil)
	require.NoError(t, err)
	return c
}

func TestParseFullConfig(t *testing.T) {
	t.Parallel()
	c := parseSpec(t)
	require.NoError(t, c.Validate())

	require.Equal(t, "shop", c.Pipeline)
	require.Equal(t, NATS{
		URL: "nats://127.0.0.1:4222", Stream: "IDEM_EVENTS", DLQStream: "IDEM_DLQ", Consumer: "idem",
		SubjectPrefix: "idem.ready", DLQSubjectPrefix: "idem.dlq",
		AckWait: Duration(30 * time.Second), MaxInFlight: 16, BackfillShare: DefaultBackfillShare,
		User: "loader", Password: "n4ts-pa55",
		TLS:      TLS{CA: "/etc/idem/ca.pem", Cert: "/etc/idem/client.pem", Key: "/etc/idem/client-key.pem"},
		MaxGroup: DefaultMaxGroup,
		Results: Results{Stream: DefaultResultsStream, SubjectPrefix: DefaultResultsSubjectPrefix,
			MaxAge: Duration(DefaultResultsMaxAge), MaxBytes: DefaultResultsMaxBytes},
	}, c.NATS)
	require.Equal(t, "postgres://idem@127.0.0.1:5432/warehouse", c.Postgres.URL)
	require.Equal(t, "127.0.0.1:9464", c.HTTP.Addr)
	require.Equal(t, []string{"customers", "daily_revenue", "events", "hourly", "orders"}, c.DatasetNames())

	orders := c.Datasets["orders"]
	five := 5
	require.Equal(t, &Dataset{
		Name: "orders", Strategy: DeleteInsert, Target: "analytics.fact_orders",
		PartitionColumn: "event_date", PartitionType: schemas.PartitionDate,
		Source:  Source{SQL: "SELECT * FROM staging.orders WHERE event_date = @partition"},
		Retries: &five, RetryDelay: Duration(5 * time.Second), MaxRetryDelay: Duration(10 * time.Minute),
		Timeout: Duration(15 * time.Minute), MaxConcurrency: 2, AllowEmpty: true,
	}, orders)
	require.Equal(t, 6, orders.MaxAttempts())

	customers := c.Datasets["customers"]
	require.Equal(t, Merge, customers.Strategy)
	require.Equal(t, []string{"customer_id"}, customers.Key)
	require.Equal(t, "updated_at", customers.VersionColumn)
	require.Equal(t, 0, *customers.Retries)
	require.Equal(t, 1, customers.MaxAttempts())
	require.Equal(t, Duration(DefaultRetryDelay), customers.RetryDelay)
	require.Empty(t, customers.RunIDColumn, "append_dedupe defaults stay off other strategies")

	events := c.Datasets["events"]
	require.Equal(t, AppendDedupe, events.Strategy)
	require.Equal(t, "loaded_by", events.RunIDColumn)
	require.Equal(t, "load_no", events.LoadSeqColumn)
	require.Equal(t, []string{"daily_revenue"}, events.Then)
	schema, view := events.ViewName()
	require.Equal(t, []string{"raw", "latest_events"}, []string{schema, view})
	require.Equal(t, DefaultRetries+1, events.MaxAttempts())

	hourly := c.Datasets["hourly"]
	require.Equal(t, schemas.PartitionHour, hourly.PartitionType)
	require.Equal(t, "public.hourly_stats", hourly.Target, "a bare table is qualified with public")
	schema, table := hourly.TargetTable()
	require.Equal(t, []string{"public", "hourly_stats"}, []string{schema, table})
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
pipeline: p
datasets:
  events:
    strategy: append_dedupe
    target: events
    key: [id]
    view: latest_events
    source: SELECT * FROM s WHERE d = @partition
  empty:
`), nil)
	require.NoError(t, err)
	require.Equal(t, DefaultNATSURL, c.NATS.URL)
	require.Equal(t, DefaultStream, c.NATS.Stream)
	require.Equal(t, DefaultDLQStream, c.NATS.DLQStream)
	require.Equal(t, DefaultConsumer, c.NATS.Consumer)
	require.Equal(t, DefaultSubjectPrefix, c.NATS.SubjectPrefix)
	require.Equal(t, DefaultDLQSubjectPrefix, c.NATS.DLQSubjectPrefix)
	require.Equal(t, DefaultAckWait, c.NATS.AckWait.Std())
	require.Equal(t, DefaultMaxInFlight, c.NATS.MaxInFlight)
	require.Equal(t, DefaultHTTPAddr, c.HTTP.Addr)
	require.Empty(t, c.Postgres.URL)
	require.Equal(t, DefaultReverifyWindow, c.Postgres.ReverifyWindow.Std())
	require.True(t, c.Postgres.ReverifyOn())

	off, err := Parse([]byte("pipeline: p\npostgres:\n  reverify: false\n  reverify_window: 1h\n"), nil)
	require.NoError(t, err)
	require.False(t, off.Postgres.ReverifyOn(), "synchronous replication turns it off")
	require.Equal(t, time.Hour, off.Postgres.ReverifyWindow.Std())

	d := c.Datasets["events"]
	require.Equal(t, "events", d.Name)
	require.Equal(t, schemas.PartitionDate, d.PartitionType)
	require.Equal(t, "public.events", d.Target)
	require.Equal(t, "public.latest_events", d.View)
	require.Equal(t, DefaultRunIDColumn, d.RunIDColumn)
	require.Equal(t, DefaultLoadSeqColumn, d.LoadSeqColumn)
	require.Equal(t, DefaultRetries, *d.Retries)
	require.Equal(t, DefaultRetryDelay, d.RetryDelay.Std())
	require.Equal(t, DefaultMaxRetryDelay, d.MaxRetryDelay.Std())
	require.Zero(t, d.Timeout)

	require.NotNil(t, c.Datasets["empty"], "a dataset without fields becomes an empty dataset")
	require.Equal(t, "empty", c.Datasets["empty"].Name)

	before := c.Redacted()
	c.WithDefaults()
	require.Equal(t, before, c.Redacted(), "WithDefaults is idempotent")
}

func TestDatasetAccessorsWithoutDefaults(t *testing.T) {
	t.Parallel()
	d := &Dataset{Target: "orders", View: "x.v"}
	schema, table := d.TargetTable()
	require.Equal(t, []string{"public", "orders"}, []string{schema, table})
	schema, view := d.ViewName()
	require.Equal(t, []string{"x", "v"}, []string{schema, view})
	require.Equal(t, DefaultRetries+1, d.MaxAttempts())
	neg := -4
	d.Retries = &neg
	require.Equal(t, 1, d.MaxAttempts())
}

func TestProblemsError(t *testing.T) {
	t.Parallel()
	p := Problems{
		{Dataset: "orders", Field: "partition_column", Message: "required for strategy delete_insert; name the target column that holds the partition key"},
		{Field: "pipeline", Message: "required"},
	}
	require.Equal(t, `dataset "orders": partition_column: required for strategy delete_insert; name the target column that holds the partition key
pipeline: required`, p.Error())
}

func TestEnvOverrides(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"IDEM_PIPELINE":            "from_env",
		"IDEM_NATS_URL":            "nats://nats-1:4222,nats://nats-2:4222",
		"IDEM_NATS_STREAM":         "EV",
		"IDEM_NATS_DLQ_STREAM":     "DL",
		"IDEM_NATS_RESULTS_STREAM": "RS",
		"IDEM_NATS_MAX_GROUP":      "32",
		"IDEM_NATS_CONSUMER":       "worker",
		"IDEM_NATS_CREDS":          "/run/idem.creds",
		"IDEM_NATS_NKEY":           "/run/idem.nk",
		"IDEM_NATS_USER":           "u",
		"IDEM_NATS_PASSWORD":       "env-pass",
		"IDEM_NATS_TOKEN":          "env-token",
		"IDEM_DATABASE_URL":        "postgres://x:env-db@db/w",
		"IDEM_HTTP_ADDR":           ":9999",
		"IDEM_UNRELATED":           "ignored",
	}
	c, err := Parse([]byte(specYAML), func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, "from_env", c.Pipeline)
	require.Equal(t, NATS{
		URL: env["IDEM_NATS_URL"], Stream: "EV", DLQStream: "DL", Consumer: "worker",
		SubjectPrefix: "idem.ready", DLQSubjectPrefix: "idem.dlq",
		AckWait: Duration(30 * time.Second), MaxInFlight: 16, BackfillShare: DefaultBackfillShare,
		Creds: "/run/idem.creds", NKey: "/run/idem.nk", User: "u", Password: "env-pass", Token: "env-token",
		TLS:      TLS{CA: "/etc/idem/ca.pem", Cert: "/etc/idem/client.pem", Key: "/etc/idem/client-key.pem"},
		MaxGroup: 32,
		Results: Results{Stream: "RS", SubjectPrefix: DefaultResultsSubjectPrefix,
			MaxAge: Duration(DefaultResultsMaxAge), MaxBytes: DefaultResultsMaxBytes},
	}, c.NATS)
	require.Equal(t, "postgres://x:env-db@db/w", c.Postgres.URL)
	require.Equal(t, ":9999", c.HTTP.Addr)

	// An empty variable is unset; a nil getenv means no environment.
	c, err = Parse([]byte(specYAML), func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, "shop", c.Pipeline)
	c, err = Parse([]byte("pipeline: p\n"), nil)
	require.NoError(t, err)
	require.Equal(t, "p", c.Pipeline)
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestSecretFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "nats-password", "file-pass\n")
	writeFile(t, dir, "nats-token", "file-token\r\n")
	dbFile := writeFile(t, dir, "db-url", "postgres://idem:file-db@db:5432/w\n")
	cfgPath := writeFile(t, dir, "idem.yaml", `
pipeline: shop
nats:
  user: loader
  password_file: nats-password   # relative to the config file
  token_file: nats-token
postgres:
  url_file: `+dbFile+`
`)
	c, err := Load(cfgPath, nil)
	require.NoError(t, err)
	require.Equal(t, "file-pass", c.NATS.Password)
	require.Equal(t, "file-token", c.NATS.Token)
	require.Equal(t, "postgres://idem:file-db@db:5432/w", c.Postgres.URL)
	require.Equal(t, "nats-password", c.NATS.PasswordFile, "the path is kept")

	// The environment wins over a file.
	c, err = Load(cfgPath, func(k string) string {
		return map[string]string{"IDEM_NATS_PASSWORD": "env-pass"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, "env-pass", c.NATS.Password)

	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		empty := writeFile(t, dir, "empty", "\n")
		tests := []struct {
			name, yaml string
			want       []string
		}{
			{"missing file", "nats:\n  password_file: " + filepath.Join(dir, "nope") + "\n",
				[]string{"nats.password_file:", "no such file", "create the file or fix the path"}},
			{"missing token file", "nats:\n  token_file: /nonexistent/token\n", []string{"nats.token_file:", "fix the path"}},
			{"missing url file", "postgres:\n  url_file: /nonexistent/url\n", []string{"postgres.url_file:", "fix the path"}},
			{"empty file", "postgres:\n  url_file: " + empty + "\n", []string{"postgres.url_file:", "is empty"}},
			{"both value and file", "nats:\n  token: t\n  token_file: " + dbFile + "\n",
				[]string{"nats.token_file: set either nats.token or nats.token_file, not both"}},
		}
		for _, tt := range tests {
			_, err := Parse([]byte(tt.yaml), nil)
			require.Error(t, err, tt.name)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w, tt.name)
			}
		}
	})
}

func TestLoadMissingConfig(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "idem.yaml"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), "idem.yaml")
}

func TestStrictDecoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"dataset key typo", "datasets:\n  orders:\n    strategy: delete_insert\n    partiton_column: d\n",
			[]string{`config: line 4: datasets.orders.partiton_column: unknown key "partiton_column"; did you mean "partition_column"?`}},
		{"top-level typo", "pipline: shop\n", []string{`line 1: pipline: unknown key "pipline"; did you mean "pipeline"?`}},
		{"nats typo", "nats:\n  ack_wiat: 5s\n", []string{`line 2: nats.ack_wiat: unknown key "ack_wiat"; did you mean "ack_wait"?`}},
		{"tls typo", "nats:\n  tls:\n    cert_file: x\n", []string{`line 3: nats.tls.cert_file: unknown key`, "known keys here: ca, cert, insecure_skip_verify, key"}},
		{"postgres typo", "postgres:\n  dsn: x\n", []string{"line 2: postgres.dsn: unknown key", "known keys here: reverify, reverify_window, statement_mode, url, url_file"}},
		{"name is not a key", "datasets:\n  orders:\n    name: orders\n", []string{"line 3: datasets.orders.name: unknown key"}},
		{"every unknown key", "pipline: x\nnats:\n  urls: y\n", []string{"line 1: pipline", "line 3: nats.urls"}},
		{"bare number duration", "nats:\n  ack_wait: 30\n", []string{`line 2: nats.ack_wait: "30" is not a duration; add a unit, e.g. "30s" for seconds`}},
		{"bad duration", "datasets:\n  a:\n    timeout: soon\n", []string{`line 3: datasets.a.timeout: "soon" is not a duration; write a Go duration such as "10s"`}},
		{"duration as list", "datasets:\n  a:\n    retry_delay: [1s]\n", []string{`line 3: datasets.a.retry_delay: want a duration such as "10s" or "30m", found a list`}},
		{"int as text", "datasets:\n  a:\n    retries: many\n", []string{`line 3: datasets.a.retries: want a whole number, found text "many"`}},
		{"bool as text", "datasets:\n  a:\n    allow_empty: sometimes\n", []string{`datasets.a.allow_empty: want true or false`}},
		{"key as mapping", "datasets:\n  a:\n    key: {id: 1}\n", []string{`line 3: datasets.a.key: want a list, e.g. [a, b], found a mapping`}},
		{"datasets as list", "datasets: [a, b]\n", []string{`line 1: datasets: want a mapping of dataset names to datasets, found a list`}},
		{"nats as text", "nats: localhost\n", []string{`line 1: nats: want a mapping of keys, found text "localhost"`}},
		{"document is a list", "- a\n", []string{"line 1", "want a mapping of keys, found a list"}},
		{"syntax error", "pipeline: [\n", []string{"config: line"}},
		{"duplicate key", "datasets:\n  a: {}\n  a: {}\n", []string{`mapping key "a" already defined`}},
		{"two documents", "pipeline: a\n---\npipeline: b\n", []string{"more than one YAML document"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml), nil)
			require.Error(t, err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestEmptyConfig(t *testing.T) {
	t.Parallel()
	for _, y := range []string{"", "# nothing\n", "---\n"} {
		c, err := Parse([]byte(y), nil)
		require.NoError(t, err)
		var p Problems
		require.ErrorAs(t, c.Validate(), &p)
		require.Equal(t, Problems{
			{Field: "pipeline", Message: "required; name the pipeline, e.g. pipeline: shop (it is the audit table's dag_id), or set IDEM_PIPELINE"},
			{Field: "datasets", Message: "none declared; declare at least one dataset under datasets:, with its strategy, target and source"},
		}, p)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
nats:
  ack_wait: 100ms
  max_in_flight: -1
datasets:
  orders:
    strategy: delete_insert
    target: analytics.FactOrders
    source: SELECT * FROM staging.orders WHERE d = now()::date
  Bad:
    strategy: upsert
    target: x
    source: SELECT 1
`), nil)
	require.NoError(t, err)
	err = c.Validate()
	var problems Problems
	require.True(t, errors.As(err, &problems))
	var got []string
	for _, p := range problems {
		got = append(got, p.Dataset+"/"+p.Field)
	}
	require.Equal(t, []string{
		"/pipeline",
		"/nats.ack_wait",
		"/nats.max_in_flight",
		"Bad/name",
		"Bad/strategy",
		"orders/target",
		"orders/source", // now()
		"orders/source", // no @partition
		"orders/partition_column",
	}, got)
	require.Equal(t, len(problems), strings.Count(err.Error(), "\n")+1, "one problem per line")
}

func TestValidateWithoutDefaults(t *testing.T) {
	t.Parallel()
	// A Config built in code without WithDefaults must not panic, and says
	// what WithDefaults would have filled.
	c := &Config{Pipeline: "p", Datasets: map[string]*Dataset{"a": nil}}
	var problems Problems
	require.ErrorAs(t, c.Validate(), &problems)
	fields := map[string]bool{}
	for _, p := range problems {
		fields[p.Field] = true
	}
	for _, f := range []string{"nats.url", "nats.stream", "nats.consumer", "nats.ack_wait", "nats.max_in_flight", "http.addr", "strategy", "target", "source", "retry_delay", "max_retry_delay"} {
		require.True(t, fields[f], "missing problem for %s in %v", f, problems)
	}
}

func TestLookup(t *testing.T) {
	c := &Config{Datasets: map[string]*Dataset{
		"daily":  {},
		"hourly": {PartitionType: schemas.PartitionHour},
	}}
	var lookup schemas.Lookup = c.Lookup
	for name, want := range map[string]schemas.PartitionType{"daily": schemas.PartitionDate, "hourly": schemas.PartitionHour} {
		got, ok := lookup(name)
		require.True(t, ok, name)
		require.Equal(t, want, got, name)
	}
	_, ok := lookup("nope")
	require.False(t, ok)
}

const observabilityYAML = `
lineage:
  openlineage:
    url: http://marquez:5000
    api_key: Ol-Key-5ecret
tracing:
  otlp:
    endpoint: otel-collector:4317
    protocol: grpc
    insecure: true
    headers:
      x-tenant: shop
`

func TestParseLineageAndTracing(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(specYAML+observabilityYAML), nil)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Equal(t, &OpenLineage{
		URL: "http://marquez:5000", Endpoint: DefaultOpenLineageEndpoint, Namespace: "shop",
		APIKey: "Ol-Key-5ecret", Timeout: Duration(DefaultOpenLineageTimeout),
	}, c.Lineage.OpenLineage, "the namespace defaults to the pipeline")
	require.Equal(t, &OTLP{Endpoint: "otel-collector:4317", Protocol: "grpc", Insecure: true, Headers: map[string]string{"x-tenant": "shop"}}, c.Tracing.OTLP)
	require.Equal(t, DefaultSampleRatio, c.Tracing.Ratio())

	before, beforeOTLP := *c.Lineage.OpenLineage, *c.Tracing.OTLP
	c.WithDefaults()
	require.Equal(t, before, *c.Lineage.OpenLineage, "WithDefaults is idempotent")
	require.Equal(t, beforeOTLP, *c.Tracing.OTLP)

	out := c.Redacted()
	require.NotContains(t, out, "Ol-Key-5ecret")
	require.Equal(t, "Ol-Key-5ecret", c.Lineage.OpenLineage.APIKey, "Redacted does not change the config")
	require.Equal(t, "shop", c.Tracing.OTLP.Headers["x-tenant"])
	back, err := Parse([]byte(out), nil)
	require.NoError(t, err)
	require.Equal(t, "REDACTED", back.Lineage.OpenLineage.APIKey)
}

func TestLineageAndTracingOffWhenAbsent(t *testing.T) {
	t.Parallel()
	c := parseSpec(t)
	require.Nil(t, c.Lineage.OpenLineage)
	require.Nil(t, c.Tracing.OTLP)
	require.Nil(t, c.Tracing.SampleRatio)
	require.NotContains(t, c.Redacted(), "lineage")
	require.NotContains(t, c.Redacted(), "tracing")
}

func TestLineageDefaultsAndFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ol-key"), []byte("Key-From-File\n"), 0o600))
	cfg := filepath.Join(dir, "idem.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(specYAML+`
lineage:
  openlineage:
    url: https://lineage.example.com/openapi/openlineage
    namespace: shop-prod
    api_key_file: ol-key
    timeout: 3s
tracing:
  otlp:
    endpoint: http://otel-collector:4318
  sample_ratio: 0
`), 0o600))
	c, err := Load(cfg, nil)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	ol := c.Lineage.OpenLineage
	require.Equal(t, "Key-From-File", ol.APIKey, "read relative to the config's folder")
	require.Equal(t, "shop-prod", ol.Namespace)
	require.Equal(t, Duration(3*time.Second), ol.Timeout)
	require.Equal(t, DefaultOTLPProtocol, c.Tracing.OTLP.Protocol)
	require.Equal(t, 0.0, c.Tracing.Ratio(), "0 is a ratio, not the default")

	_, err = Parse([]byte("lineage:\n  openlineage:\n    url: http://m\n    api_key: k\n    api_key_file: f\n"), nil)
	require.ErrorContains(t, err, "lineage.openlineage.api_key_file: set either lineage.openlineage.api_key or lineage.openlineage.api_key_file, not both")
	_, err = Parse([]byte("lineage:\n  openlineage:\n    url: http://m\n    namesapce: x\n"), nil)
	require.ErrorContains(t, err, `lineage.openlineage.namesapce: unknown key "namesapce"; did you mean "namespace"?`)
	_, err = Parse([]byte("tracing:\n  otlp:\n    endpoint: x:1\n  sample_rate: 1\n"), nil)
	require.ErrorContains(t, err, `did you mean "sample_ratio"?`)
}
