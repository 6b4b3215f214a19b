package e2e

// The cluster deploy files (docker-compose.cluster.yaml, kubernetes/nats.yaml,
// nats/nats-cluster.conf) cannot run here either; they are kept consistent
// with the code and with each other by reading them: the same streams, the
// same ports, the same environment variables, three servers that route to
// each other, R3 streams with fsync on every write. Their Kubernetes schema
// is not validated here: the validators need the schemas from the network
// at test time.

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/config"
)

// natsServers are the cluster's servers: compose services and StatefulSet pods.
var natsServers = []string{"nats-0", "nats-1", "nats-2"}

// clusterConf parses deploy/nats/nats-cluster.conf as server name would,
// with the secrets it expects in the environment.
func clusterConf(t *testing.T, name string) *server.Options {
	t.Helper()
	for k, v := range map[string]string{"NATS_SERVER_NAME": name, "IDEM_SERVE_PASSWORD": "a",
		"IDEM_PUBLISH_PASSWORD": "b", "IDEM_ADMIN_PASSWORD": "c", "NATS_SYS_PASSWORD": "d"} {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(repoPath(t, "deploy/nats/nats-cluster.conf"))
	require.NoError(t, err)
	return opts
}

// TestDeployNATSClusterConfig: every server runs JetStream with fsync on
// every write, under its own name, and routes to all three servers by the
// names the headless service (and compose's aliases) give them.
func TestDeployNATSClusterConfig(t *testing.T) {
	opts := clusterConf(t, "nats-1")
	require.Equal(t, "nats-1", opts.ServerName)
	require.True(t, opts.JetStream)
	require.True(t, opts.SyncAlways, "jetstream.sync_interval must be always")
	require.Equal(t, 4222, opts.Port)
	require.Equal(t, 6222, opts.Cluster.Port)
	require.Equal(t, 8222, opts.HTTPPort)
	require.NotEmpty(t, opts.Cluster.Name)
	var hosts []string
	for _, r := range opts.Routes {
		require.Equal(t, "nats-route", r.Scheme)
		require.Equal(t, "6222", r.Port())
		hosts = append(hosts, r.Hostname())
	}
	want := make([]string, len(natsServers))
	for i, s := range natsServers {
		want[i] = s + ".nats-headless"
	}
	require.ElementsMatch(t, want, hosts)
	for name, sc := range deployStreams(t) {
		require.Equal(t, len(natsServers), sc.Replicas, "%s: one replica per server", name)
	}
}

// natsURLHosts splits a comma-separated IDEM_NATS_URL into host:port.
func natsURLHosts(t *testing.T, list string) []string {
	t.Helper()
	var out []string
	for _, s := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		require.NoError(t, err, s)
		require.Equal(t, "nats", u.Scheme, s)
		out = append(out, u.Host)
	}
	return out
}

// knownEnv are the variables idem reads (config's overrides) and the ones
// the NATS configs read.
func knownEnv(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, "internal/config/load.go"))
	require.NoError(t, err)
	var out []string
	for _, f := range strings.Split(string(b), `{"`)[1:] {
		if name, _, ok := strings.Cut(f, `"`); ok && strings.HasPrefix(name, "IDEM_") {
			out = append(out, name)
		}
	}
	require.Contains(t, out, "IDEM_NATS_URL")
	return out
}

func TestDeployComposeCluster(t *testing.T) {
	docs := yamlDocs(t, repoPath(t, "deploy/docker-compose.cluster.yaml"))
	require.Len(t, docs, 1)
	services := at(t, docs[0], "services").(map[string]any)
	env := knownEnv(t)

	// Three servers, each under its name, with its own volume, reachable
	// under the alias the routes use.
	for _, s := range natsServers {
		require.Contains(t, services, s)
		svc := services[s]
		require.Equal(t, s, at(t, svc, "environment", "NATS_SERVER_NAME"))
		require.Equal(t, []any{s + ".nats-headless"}, at(t, svc, "networks", "default", "aliases"))
		require.Contains(t, strings.Join(toStrings(at(t, svc, "command").([]any)), " "), "/etc/nats/nats-cluster.conf")
		vols := strings.Join(toStrings(at(t, svc, "volumes").([]any)), " ")
		require.Contains(t, vols, s+"-data:/data/jetstream")
		for _, f := range []string{"nats-cluster.conf", "nats-server.conf", "permissions.conf"} {
			require.Contains(t, vols, "./nats/"+f+":/etc/nats/"+f)
		}
	}
	wantHosts := []string{"nats-0:4222", "nats-1:4222", "nats-2:4222"}

	// The streams service creates exactly the deployed streams.
	script := strings.Join(toStrings(at(t, services["streams"], "command").([]any)), "\n")
	require.ElementsMatch(t, keys(deployStreams(t)), streamLoop(t, script))
	require.ElementsMatch(t, wantHosts, natsURLHosts(t, at(t, services["streams"], "environment", "NATS_URL").(string)))

	// Two idem replicas, each with every server's URL and only variables
	// idem reads, on one config, on different host ports.
	var serves []string
	for name, s := range services {
		cmd, ok := s.(map[string]any)["command"].([]any)
		if ok && len(cmd) > 0 && cmd[0] == "serve" {
			serves = append(serves, name)
		}
	}
	require.Len(t, serves, 2, "two idem replicas")
	ports := map[string]bool{}
	for _, name := range append(serves, "consumers") {
		e := at(t, services[name], "environment").(map[string]any)
		require.ElementsMatch(t, wantHosts, natsURLHosts(t, e["IDEM_NATS_URL"].(string)), name)
		for k := range e {
			require.Contains(t, env, k, "%s sets %s, which idem does not read", name, k)
		}
		if name == "consumers" {
			continue
		}
		p := at(t, services[name], "ports", 0).(string)
		require.True(t, strings.HasSuffix(p, ":9464"), "%s: the HTTP port of deploy/idem.yaml is 9464", name)
		require.False(t, ports[p], "%s: host port %s used twice", name, p)
		ports[p] = true
		require.Equal(t, "service_completed_successfully", at(t, services[name], "depends_on", "consumers", "condition"))
	}
	cfg, err := config.Load(repoPath(t, "deploy/idem.yaml"), nil)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(cfg.HTTP.Addr, ":9464"))
}

func TestDeployKubernetesNATSCluster(t *testing.T) {
	byKind := map[string]map[string]any{}
	for _, d := range yamlDocs(t, repoPath(t, "deploy/kubernetes/nats.yaml")) {
		byKind[at(t, d, "kind").(string)+"/"+at(t, d, "metadata", "name").(string)] = d
	}
	read := func(rel string) string {
		b, err := os.ReadFile(repoPath(t, rel))
		require.NoError(t, err)
		return string(b)
	}
	cm := byKind["ConfigMap/nats-config"]
	require.NotNil(t, cm)
	for _, f := range []string{"nats-cluster.conf", "nats-server.conf", "permissions.conf"} {
		require.Equal(t, read("deploy/nats/"+f), at(t, cm, "data", f), f)
	}

	sts := byKind["StatefulSet/nats"]
	require.NotNil(t, sts)
	require.Equal(t, len(natsServers), at(t, sts, "spec", "replicas"))
	require.Equal(t, "nats-headless", at(t, sts, "spec", "serviceName"))
	headless := byKind["Service/nats-headless"]
	require.NotNil(t, headless)
	require.Equal(t, "None", at(t, headless, "spec", "clusterIP"))
	ns := at(t, sts, "metadata", "namespace").(string)

	// The container's ports are the config's, and the headless service
	// exposes them.
	opts := clusterConf(t, "nats-0")
	c := at(t, sts, "spec", "template", "spec", "containers", 0)
	require.Equal(t, []any{"-c", "/etc/nats/nats-cluster.conf"}, at(t, c, "args"))
	require.Equal(t, "/etc/nats", at(t, c, "volumeMounts", 0, "mountPath"))
	require.Equal(t, "metadata.name", at(t, c, "env", 0, "valueFrom", "fieldRef", "fieldPath"))
	require.Equal(t, "NATS_SERVER_NAME", at(t, c, "env", 0, "name"))
	ports := map[string]int{}
	for _, p := range at(t, c, "ports").([]any) {
		ports[at(t, p, "name").(string)] = at(t, p, "containerPort").(int)
	}
	require.Equal(t, map[string]int{"client": opts.Port, "cluster": opts.Cluster.Port, "monitor": opts.HTTPPort}, ports)
	svcPorts := map[string]int{}
	for _, p := range at(t, headless, "spec", "ports").([]any) {
		svcPorts[at(t, p, "name").(string)] = at(t, p, "port").(int)
	}
	require.Equal(t, ports, svcPorts)
	require.Equal(t, "/data/jetstream", opts.StoreDir)
	require.True(t, slices.ContainsFunc(at(t, c, "volumeMounts").([]any), func(v any) bool {
		return at(t, v, "mountPath") == opts.StoreDir && at(t, v, "name") == at(t, sts, "spec", "volumeClaimTemplates", 0, "metadata", "name")
	}), "the JetStream store is on the persistent volume")
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		require.Equal(t, "monitor", at(t, c, probe, "httpGet", "port"), probe)
		require.True(t, strings.HasPrefix(at(t, c, probe, "httpGet", "path").(string), "/healthz"), probe)
	}

	// A drain takes at most one server: R3 keeps a majority.
	pdb := byKind["PodDisruptionBudget/nats"]
	require.NotNil(t, pdb)
	require.Equal(t, 1, at(t, pdb, "spec", "maxUnavailable"))
	require.Equal(t, at(t, sts, "spec", "selector", "matchLabels"), at(t, pdb, "spec", "selector", "matchLabels"))

	// idem reaches every server by its stable name, on the client port, and
	// keeps one replica through a drain, with probes on /healthz and /readyz.
	var dep, idemPDB map[string]any
	for _, d := range yamlDocs(t, repoPath(t, "deploy/kubernetes/deployment.yaml")) {
		switch at(t, d, "kind") {
		case "Deployment":
			dep = d
		case "PodDisruptionBudget":
			idemPDB = d
		}
	}
	require.NotNil(t, idemPDB)
	require.Equal(t, at(t, dep, "spec", "selector", "matchLabels"), at(t, idemPDB, "spec", "selector", "matchLabels"))
	ic := at(t, dep, "spec", "template", "spec", "containers", 0)
	require.Equal(t, "/healthz", at(t, ic, "livenessProbe", "httpGet", "path"))
	require.Equal(t, "/readyz", at(t, ic, "readinessProbe", "httpGet", "path"))
	var urls string
	for _, e := range at(t, ic, "env").([]any) {
		if at(t, e, "name") == "IDEM_NATS_URL" {
			urls = at(t, e, "value").(string)
		}
	}
	want := make([]string, len(natsServers))
	for i, s := range natsServers {
		want[i] = fmt.Sprintf("%s.nats-headless.%s.svc:%d", s, ns, opts.Port)
	}
	require.ElementsMatch(t, want, natsURLHosts(t, urls))
	require.GreaterOrEqual(t, at(t, dep, "spec", "replicas").(int), 2)
}
