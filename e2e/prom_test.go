package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/internal/localpg"
)

// A real Prometheus server (Debian's prometheus package, which make test
// installs for promtool) scraping real idem serve processes, with the
// shipped alert rules. Scrapes and rule evaluations run every second.
const (
	promScrape   = time.Second
	promEvaluate = time.Second
	// promShortFor replaces every for: in the rules copy of promShortRules.
	promShortFor = "2s"
)

const shippedRules = "../deploy/prometheus/idem-alerts.yaml"

// promServer is one Prometheus process and its file of scrape targets.
type promServer struct {
	t       *testing.T
	base    string
	targets string
	cmd     *exec.Cmd
	mu      sync.Mutex
	log     bytes.Buffer
}

func (p *promServer) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startProm starts Prometheus with rules (a file path) and no target yet.
func startProm(t *testing.T, rules string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("the prometheus server is not installed (make test installs Debian's prometheus package): %v", err)
	}
	dir := t.TempDir()
	port, err := localpg.FreePort()
	require.NoError(t, err)
	p := &promServer{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), targets: filepath.Join(dir, "targets.json")}
	p.setTargets()
	rulesAbs, err := filepath.Abs(rules)
	require.NoError(t, err)
	cfg := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: 900ms
  evaluation_interval: %s
rule_files: [%q]
scrape_configs:
  - job_name: idem
    file_sd_configs:
      - files: [%q]
        refresh_interval: 1s
`, promScrape, promEvaluate, rulesAbs, p.targets)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
	p.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	p.cmd.Stdout = syncBuf{&p.mu, &p.log}
	p.cmd.Stderr = p.cmd.Stdout
	require.NoError(t, p.cmd.Start())
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.output())
		}
	})
	require.Eventually(t, func() bool {
		r, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	}, 30*time.Second, 50*time.Millisecond, "prometheus did not start:\n%s", p.output())
	return p
}

// setTargets replaces the scrape targets (host:port), as a service
// discovery would; Prometheus sees the file change within a second.
func (p *promServer) setTargets(addrs ...string) {
	p.t.Helper()
	b, err := json.Marshal([]map[string]any{{"targets": append([]string{}, addrs...)}})
	require.NoError(p.t, err)
	tmp := p.targets + ".tmp"
	require.NoError(p.t, os.WriteFile(tmp, b, 0o600))
	require.NoError(p.t, os.Rename(tmp, p.targets))
}

func (p *promServer) api(path string, q url.Values, into any) {
	p.t.Helper()
	r, err := http.Get(p.base + path + "?" + q.Encode())
	require.NoError(p.t, err)
	defer r.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	require.NoError(p.t, json.NewDecoder(r.Body).Decode(&env))
	require.Equal(p.t, "success", env.Status, "%s %v: %s", path, q, env.Error)
	require.NoError(p.t, json.Unmarshal(env.Data, into))
}

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

func (a promAlert) String() string {
	return fmt.Sprintf("%s%v %s since %s (%s)", a.Labels["alertname"], a.Labels, a.State, a.ActiveAt.Format(time.RFC3339Nano), a.Value)
}

// alerts are the pending and firing alerts.
func (p *promServer) alerts() []promAlert {
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.api("/api/v1/alerts", nil, &d)
	return d.Alerts
}

type promRule struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	Duration  float64
}

func (p *promServer) rules() []promRule {
	var d struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	p.api("/api/v1/rules", nil, &d)
	var out []promRule
	for _, g := range d.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// requireRulesHealthy: every shipped alert is loaded and evaluates without
// an error (a rule whose query cannot run never fires).
func (p *promServer) requireRulesHealthy() {
	p.t.Helper()
	want := shippedAlertNames(p.t)
	require.Eventually(p.t, func() bool {
		rs := p.rules()
		if len(rs) != len(want) {
			return false
		}
		for _, r := range rs {
			if r.Health != "ok" {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond, "rules not all evaluated and healthy: %+v", p.rules())
	for _, r := range p.rules() {
		require.Equal(p.t, "alerting", r.Type, r.Name)
		require.Empty(p.t, r.LastError, r.Name)
	}
}

// matches: a has every label of want.
func (a promAlert) matches(name string, want map[string]string) bool {
	if a.Labels["alertname"] != name {
		return false
	}
	for k, v := range want {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

// waitFiring waits for alert name with the labels of want to fire and
// returns it with the time it was first seen firing.
func (p *promServer) waitFiring(name string, want map[string]string, within time.Duration) (promAlert, time.Time) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, a := range p.alerts() {
			if a.matches(name, want) && a.State == "firing" {
				return a, time.Now()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("%s %v did not fire within %s; active: %v", name, want, within, p.alerts())
	return promAlert{}, time.Time{}
}

// waitGone waits until no alert named name with the labels of want is
// pending or firing.
func (p *promServer) waitGone(name string, want map[string]string, within time.Duration) {
	p.t.Helper()
	require.Eventually(p.t, func() bool {
		for _, a := range p.alerts() {
			if a.matches(name, want) {
				return false
			}
		}
		return true
	}, within, 100*time.Millisecond, "%s %v still active: %v", name, want, p.alerts())
}

// requireSilent: no alert is pending or firing at any of the evaluations
// of the next d.
func (p *promServer) requireSilent(d time.Duration) {
	p.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		require.Empty(p.t, p.alerts(), "alerts while all is well")
		time.Sleep(200 * time.Millisecond)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

// query evaluates expr now.
func (p *promServer) query(expr string) []promSample {
	p.t.Helper()
	var d struct {
		Result []promSample `json:"result"`
	}
	p.api("/api/v1/query", url.Values{"query": {expr}}, &d)
	return d.Result
}

// queryRange evaluates expr every second from start to now.
func (p *promServer) queryRange(expr string, start time.Time) []promSample {
	p.t.Helper()
	var d struct {
		Result []promSample `json:"result"`
	}
	p.api("/api/v1/query_range", url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(time.Now())}, "step": {"1"}}, &d)
	return d.Result
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

// waitScraped waits until Prometheus has scraped the idem at addr and
// holds its readiness.
func (p *promServer) waitScraped(addr string) {
	p.t.Helper()
	require.Eventually(p.t, func() bool {
		return len(p.query(fmt.Sprintf(`idem_ready{instance=%q} == 1 and on (instance) up{instance=%q} == 1`, addr, addr))) == 1
	}, 30*time.Second, 100*time.Millisecond, "idem at %s never scraped ready", addr)
}

// shortRules writes a copy of the shipped rules in which only the for:
// durations are promShortFor, so the rules that wait minutes (or a day)
// fire within a test; it checks that nothing else differs.
func shortRules(t *testing.T) string {
	t.Helper()
	shipped, err := os.ReadFile(shippedRules)
	require.NoError(t, err)
	forLine := regexp.MustCompile(`(?m)^(\s+for:\s+)\S+\s*$`)
	require.Len(t, forLine.FindAll(shipped, -1), 6, "the shipped rules' for: lines")
	short := forLine.ReplaceAll(shipped, []byte("${1}"+promShortFor))
	path := filepath.Join(t.TempDir(), "idem-alerts-short-for.yaml")
	require.NoError(t, os.WriteFile(path, short, 0o600))

	// Everything but for: is the shipped file's.
	strip := func(b []byte) (any, []string) {
		var doc map[string]any
		require.NoError(t, yaml.Unmarshal(b, &doc))
		var fors []string
		for _, g := range doc["groups"].([]any) {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				rule := r.(map[string]any)
				if f, ok := rule["for"]; ok {
					fors = append(fors, fmt.Sprint(f))
					delete(rule, "for")
				}
			}
		}
		return doc, fors
	}
	a, shippedFor := strip(shipped)
	b, shortFor := strip(short)
	require.Equal(t, a, b, "the copy differs from the shipped rules in more than for:")
	require.Len(t, shortFor, len(shippedFor))
	for _, f := range shortFor {
		require.Equal(t, promShortFor, f)
	}
	return path
}

// shippedRule is an alert of the shipped rules file, as the runbook and
// alert tests read it.
type shippedRule struct {
	Alert       string            `yaml:"alert"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T, path string) []shippedRule {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Rules []shippedRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc), path)
	var out []shippedRule
	for _, g := range doc.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func shippedAlertNames(t *testing.T) []string {
	var out []string
	for _, r := range readRules(t, shippedRules) {
		out = append(out, r.Alert)
	}
	return out
}

// timing is one alert's time from its cause to firing, logged for the
// record (never asserted against the wall clock, but for the first dead
// letter, which is bounded by Prometheus's own intervals).
func logTiming(t *testing.T, name, cause string, from, to time.Time) {
	t.Logf("alert timing: %s fired %.1fs after %s", name, to.Sub(from).Seconds(), cause)
}
