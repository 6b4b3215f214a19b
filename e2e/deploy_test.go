package e2e

// deploy/ cannot run here (no Docker, no Kubernetes), so it is kept correct
// by reading: every JSON and YAML file parses, the stream and consumer
// definitions are what consumer.EnsureStreams creates and leaves alone, the
// nats-server config parses with fsync on every write, and the manifests
// hold the config, probes and grace period idem needs.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/embeddednats"
	"github.com/idem-data/idem/internal/service"
)

// strictJSON decodes a file into v, refusing unknown fields (a typo in a
// field name would otherwise be ignored by the nats CLI too).
func strictJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), path)
}

// deployStreams are deploy/nats/streams/*.json, by name.
func deployStreams(t *testing.T) map[string]jetstream.StreamConfig {
	t.Helper()
	files, err := filepath.Glob(repoPath(t, "deploy/nats/streams/*.json"))
	require.NoError(t, err)
	out := map[string]jetstream.StreamConfig{}
	for _, f := range files {
		var sc jetstream.StreamConfig
		strictJSON(t, f, &sc)
		require.Equal(t, sc.Name+".json", filepath.Base(f))
		out[sc.Name] = sc
	}
	return out
}

// deployConsumers are deploy/nats/consumers/<stream>.<durable>.json, by file name.
func deployConsumers(t *testing.T) map[string]jetstream.ConsumerConfig {
	t.Helper()
	files, err := filepath.Glob(repoPath(t, "deploy/nats/consumers/*.json"))
	require.NoError(t, err)
	out := map[string]jetstream.ConsumerConfig{}
	for _, f := range files {
		var cc jetstream.ConsumerConfig
		strictJSON(t, f, &cc)
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = cc
	}
	return out
}

// deployStreamsConfig is what idem derives from deploy/idem.yaml for
// EnsureStreams, by the function `idem serve` and `idem streams` use.
func deployStreamsConfig(t *testing.T) consumer.StreamsConfig {
	t.Helper()
	cfg, err := config.Load(repoPath(t, "deploy/idem.yaml"), nil)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	return service.StreamsConfig(cfg)
}

func startPlainNATS(t *testing.T) (*embeddednats.Server, jetstream.JetStream) {
	t.Helper()
	// The deployed streams reserve their max_bytes (10 GiB for the events):
	// more than a server on a small or busy tmpfs would allow by default.
	ns, err := embeddednats.Start(embeddednats.Options{StoreDir: filepath.Join(t.TempDir(), "js"), MaxStore: 64 << 30})
	require.NoError(t, err)
	t.Cleanup(ns.Stop)
	nc, err := nats.Connect(ns.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return ns, js
}

// TestDeployStreamsAreWhatIdemCreates: on an empty server EnsureStreams
// creates streams with the deployed names, subjects, storage, retention and
// duplicate window (and, for the results stream, the limits idem sets
// itself), and consumers with the deployed settings.
func TestDeployStreamsAreWhatIdemCreates(t *testing.T) {
	t.Parallel()
	streams, consumers := deployStreams(t), deployConsumers(t)
	sc := deployStreamsConfig(t)
	_, js := startPlainNATS(t)
	ctx := context.Background()
	require.NoError(t, consumer.EnsureStreams(ctx, js, sc))

	require.ElementsMatch(t, []string{sc.Stream, sc.DLQStream, sc.AdvisoryStream, sc.ResultsStream}, keys(streams))
	for name, want := range streams {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err, name)
		got := s.CachedInfo().Config
		require.Equal(t, want.Subjects, got.Subjects, name)
		require.Equal(t, want.Storage, got.Storage, name)
		require.Equal(t, want.Retention, got.Retention, name)
		require.Equal(t, want.Duplicates, got.Duplicates, name)
		require.Equal(t, want.Description, got.Description, name)
		if name == sc.ResultsStream {
			require.Equal(t, want.Discard, got.Discard, name)
			require.Equal(t, want.MaxAge, got.MaxAge, name)
			require.Equal(t, want.MaxBytes, got.MaxBytes, name)
		}
		require.Equal(t, jetstream.FileStorage, want.Storage, "%s: acknowledged messages must survive a restart", name)
		require.Equal(t, 3, want.Replicas, "%s: production runs three replicas", name)
	}
	require.Len(t, consumers, 3)
	for file, want := range consumers {
		stream, durable, _ := strings.Cut(file, ".")
		require.Equal(t, durable, want.Durable, file)
		c, err := js.Consumer(ctx, stream, durable)
		require.NoError(t, err, file)
		requireSameConsumer(t, file, want, c.CachedInfo().Config)
	}
}

func requireSameConsumer(t *testing.T, name string, want, got jetstream.ConsumerConfig) {
	t.Helper()
	require.Equal(t, want.Durable, got.Durable, name)
	require.Equal(t, want.DeliverPolicy, got.DeliverPolicy, name)
	require.Equal(t, want.AckPolicy, got.AckPolicy, name)
	require.Equal(t, want.AckWait, got.AckWait, name)
	require.Equal(t, want.MaxDeliver, got.MaxDeliver, name)
	require.Equal(t, want.FilterSubject, got.FilterSubject, name)
	require.Equal(t, want.ReplayPolicy, got.ReplayPolicy, name)
	if want.MaxAckPending != 0 {
		require.Equal(t, want.MaxAckPending, got.MaxAckPending, name)
	}
}

// TestDeployStreamsAreLeftAlone: streams and consumers created from the
// deploy files, as an operator does with the nats CLI, are accepted by
// `idem streams` and left as they were (the replicas become 1 here: one
// server).
func TestDeployStreamsAreLeftAlone(t *testing.T) {
	t.Parallel()
	ns, js := startPlainNATS(t)
	ctx := context.Background()
	before := map[string]jetstream.StreamConfig{}
	for name, sc := range deployStreams(t) {
		sc.Replicas = 1
		s, err := js.CreateStream(ctx, sc)
		require.NoError(t, err, name)
		before[name] = s.CachedInfo().Config
	}
	for file, cc := range deployConsumers(t) {
		stream, _, _ := strings.Cut(file, ".")
		_, err := js.CreateConsumer(ctx, stream, cc)
		require.NoError(t, err, file)
	}
	code, out := runIdem(t, []string{"IDEM_NATS_URL=" + ns.URL()}, "streams", "--config", repoPath(t, "deploy/idem.yaml"))
	require.Equal(t, 0, code, out)
	for name, want := range before {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		got := s.CachedInfo().Config
		got.Metadata, want.Metadata = nil, nil
		require.Equal(t, want, got, "idem streams changed %s", name)
	}
	for file, want := range deployConsumers(t) {
		stream, durable, _ := strings.Cut(file, ".")
		c, err := js.Consumer(ctx, stream, durable)
		require.NoError(t, err)
		requireSameConsumer(t, file, want, c.CachedInfo().Config)
	}
}

// TestDeployNATSServerConfig parses deploy/nats/nats-server.conf (and the
// permissions it includes) with nats-server's parser.
func TestDeployNATSServerConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := deployNATSConf(t, dir, map[string]string{
		"IDEM_SERVE_PASSWORD": "a", "IDEM_PUBLISH_PASSWORD": "b", "IDEM_ADMIN_PASSWORD": "c", "NATS_SYS_PASSWORD": "d",
	})
	path := writeFile(t, dir, "nats-server.conf", conf)
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	require.True(t, opts.JetStream)
	require.True(t, opts.SyncAlways, "jetstream.sync_interval must be always")
	require.Equal(t, "/data/jetstream", opts.StoreDir)
	require.Zero(t, opts.MaxPayload, "max_payload stays at the 1 MiB default")
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	require.Contains(t, users, "idem")
	perms := users["idem"].Permissions
	require.NotNil(t, perms)
	require.Contains(t, perms.Publish.Deny, "$JS.API.STREAM.CREATE.>")
	require.Contains(t, perms.Publish.Allow, "idem.dlq.>")
	require.Contains(t, perms.Publish.Allow, "idem.result.>")
	for name := range deployStreams(t) {
		require.Contains(t, perms.Publish.Allow, "$JS.API.STREAM.INFO."+name, "idem serve checks every stream at start")
	}
	require.Equal(t, []string{"_INBOX.>"}, perms.Subscribe.Allow)

	// The publisher (waiting or not) reads, and publishes only events: no
	// allow of its may reach what changes a stream, touches a durable
	// consumer, or writes a dead letter or a result.
	require.Contains(t, users, "publisher")
	pub := users["publisher"].Permissions
	require.NotNil(t, pub)
	require.Equal(t, []string{"_INBOX.>"}, pub.Subscribe.Allow)
	forbidden := []string{"idem.dlq.>", "idem.result.>", "$JS.ACK.>", "$KV.>"}
	for name := range deployStreams(t) {
		for _, op := range []string{"CREATE", "UPDATE", "DELETE", "PURGE", "MSG.DELETE"} {
			forbidden = append(forbidden, "$JS.API.STREAM."+op+"."+name)
		}
	}
	for file := range deployConsumers(t) {
		stream, durable, _ := strings.Cut(file, ".")
		for _, op := range []string{"CREATE", "DURABLE.CREATE", "DELETE", "MSG.NEXT"} {
			forbidden = append(forbidden, "$JS.API.CONSUMER."+op+"."+stream+"."+durable, "$JS.API.CONSUMER."+op+"."+stream+"."+durable+".>")
		}
	}
	for _, allow := range pub.Publish.Allow {
		for _, f := range forbidden {
			require.False(t, server.SubjectsCollide(allow, f), "the publisher's %q allows %q", allow, f)
		}
	}
}

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		require.NoError(t, err, path)
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// at walks a decoded YAML document: string keys index maps, ints index lists.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "at %v: not a mapping", path)
			v, ok = m[k]
			require.True(t, ok, "at %v: no %q", path, k)
		case int:
			l, ok := v.([]any)
			require.True(t, ok, "at %v: not a list", path)
			require.Less(t, k, len(l), "at %v", path)
			v = l[k]
		}
	}
	return v
}

// streamLoop is the list of a script's `for s in A B C; do` (the streams
// it creates from deploy/nats/streams), which must name every stream.
func streamLoop(t *testing.T, script string) []string {
	t.Helper()
	m := regexp.MustCompile(`for s in ([^;]+); do`).FindAllStringSubmatch(script, -1)
	require.Len(t, m, 1, "one loop over the streams in:\n%s", script)
	return strings.Fields(m[0][1])
}

// TestDeployREADMEStreams: the order of operations creates every stream.
func TestDeployREADMEStreams(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(repoPath(t, "deploy/README.md"))
	require.NoError(t, err)
	require.ElementsMatch(t, keys(deployStreams(t)), streamLoop(t, string(b)))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// graceArg is the --grace of an idem command line, or the default.
func graceArg(t *testing.T, args []any) time.Duration {
	t.Helper()
	for i, a := range args {
		s, _ := a.(string)
		v, ok := strings.CutPrefix(s, "--grace=")
		if s == "--grace" && i+1 < len(args) {
			v, ok = args[i+1].(string), true
		}
		if ok {
			d, err := time.ParseDuration(v)
			require.NoError(t, err)
			return d
		}
	}
	return consumer.DefaultShutdownGrace
}

func TestDeployKubernetes(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(repoPath(t, "deploy/kubernetes/*.yaml"))
	require.NoError(t, err)
	byKind := map[string]map[string]any{}
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			kind, name := at(t, d, "kind").(string), at(t, d, "metadata", "name").(string)
			require.NotContains(t, byKind, kind+"/"+name, "defined twice")
			byKind[kind+"/"+name] = d
		}
	}
	read := func(rel string) string {
		b, err := os.ReadFile(repoPath(t, rel))
		require.NoError(t, err)
		return string(b)
	}

	// The ConfigMaps carry the very files of deploy/, so they cannot drift.
	require.Contains(t, byKind, "ConfigMap/idem")
	require.Equal(t, read("deploy/idem.yaml"), at(t, byKind["ConfigMap/idem"], "data", "idem.yaml"))
	setup := byKind["ConfigMap/idem-setup"]
	require.NotNil(t, setup)
	for name := range deployStreams(t) {
		require.Equal(t, read("deploy/nats/streams/"+name+".json"), at(t, setup, "data", name+".json"), name)
	}
	require.Equal(t, read("deploy/postgres/grants.sql"), at(t, setup, "data", "grants.sql"))
	// The setup Job creates every one of those streams.
	job := byKind["Job/idem-setup"]
	require.NotNil(t, job)
	step := at(t, job, "spec", "template", "spec", "initContainers", 0)
	require.Equal(t, "streams", at(t, step, "name"))
	require.ElementsMatch(t, keys(deployStreams(t)), streamLoop(t, at(t, step, "args", 0).(string)))

	dep := byKind["Deployment/idem"]
	require.NotNil(t, dep)
	pod := at(t, dep, "spec", "template", "spec")
	c := at(t, pod, "containers", 0)
	args := at(t, c, "args").([]any)
	require.Equal(t, "serve", args[0])
	grace := graceArg(t, args)
	term := time.Duration(at(t, pod, "terminationGracePeriodSeconds").(int)) * time.Second
	require.Greater(t, term, grace+5*time.Second, "Kubernetes must not SIGKILL idem before its --grace is over")
	require.Equal(t, "/healthz", at(t, c, "livenessProbe", "httpGet", "path"))
	require.Equal(t, "/readyz", at(t, c, "readinessProbe", "httpGet", "path"))
	require.Equal(t, "http", at(t, c, "livenessProbe", "httpGet", "port"))
	require.Equal(t, 9464, at(t, c, "ports", 0, "containerPort"))
	require.Equal(t, "http", at(t, c, "ports", 0, "name"))
	require.Equal(t, "idem", at(t, c, "envFrom", 0, "secretRef", "name"))
	require.Equal(t, true, at(t, c, "securityContext", "readOnlyRootFilesystem"))

	// The Secret holds what the config leaves to the environment.
	sec := byKind["Secret/idem"]
	require.NotNil(t, sec)
	for _, k := range []string{"IDEM_DATABASE_URL", "IDEM_NATS_USER", "IDEM_NATS_PASSWORD"} {
		require.Contains(t, at(t, sec, "stringData"), k)
	}
	require.Contains(t, at(t, sec, "stringData", "IDEM_DATABASE_URL"), "sslmode=verify-full")

	// The config in the ConfigMap is valid, and listens where the probes look.
	cfg, err := config.Parse([]byte(at(t, byKind["ConfigMap/idem"], "data", "idem.yaml").(string)), nil)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	require.Equal(t, "0.0.0.0:9464", cfg.HTTP.Addr)
}

func TestDeployCompose(t *testing.T) {
	t.Parallel()
	docs := yamlDocs(t, repoPath(t, "deploy/docker-compose.yaml"))
	require.Len(t, docs, 1)
	services := at(t, docs[0], "services").(map[string]any)
	for _, s := range []string{"nats", "postgres", "migrate", "grants", "streams", "idem"} {
		require.Contains(t, services, s)
	}
	idem := services["idem"]
	cmd := at(t, idem, "command").([]any)
	require.Equal(t, "serve", cmd[0])
	stop, err := time.ParseDuration(at(t, idem, "stop_grace_period").(string))
	require.NoError(t, err)
	require.Greater(t, stop, graceArg(t, cmd)+5*time.Second)
	for _, dep := range []string{"grants", "streams"} {
		require.Equal(t, "service_completed_successfully", at(t, idem, "depends_on", dep, "condition"))
	}
	natsCmd := strings.Join(toStrings(at(t, services["nats"], "command").([]any)), " ")
	require.Contains(t, natsCmd, "nats-server.conf")
	// Every file a service mounts from deploy/ exists.
	mount := regexp.MustCompile(`^\./([^:]+):`)
	for name, s := range services {
		vols, _ := s.(map[string]any)["volumes"].([]any)
		for _, v := range vols {
			if m := mount.FindStringSubmatch(v.(string)); m != nil {
				_, err := os.Stat(repoPath(t, filepath.Join("deploy", m[1])))
				require.NoError(t, err, "%s mounts %s", name, m[1])
			}
		}
	}
}

func toStrings(l []any) []string {
	out := make([]string, len(l))
	for i, v := range l {
		out[i], _ = v.(string)
	}
	return out
}
