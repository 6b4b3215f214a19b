package e2e

// The scheduler recipes of docs/recipes/ and docs/SCHEDULERS.md, run as they
// are written against a real `idem serve`.
//
// How a recipe marks what this test runs:
//   - in a .py file, a line `# recipe-shell: NAME` right before a module
//     constant `CONST = r"""..."""` (a raw string, so its text is the
//     command exactly);
//   - in a .md file, a line `<!-- recipe-shell: NAME -->` right before a
//     fenced block (```sh, or ```crontab for a crontab: its variables, then
//     one schedule line whose command is run as cron runs it, $SHELL -c);
//   - the NATS permissions of a waiting publisher in docs/SCHEDULERS.md, a
//     line `<!-- recipe-nats: waiting_publisher -->` before a ```conf block.
//
// Every marked command must be run by a subtest (the test fails on one it
// did not run). `idem` is the built binary (first on PATH) and its config
// comes from IDEM_CONFIG, as the recipes expect; Airflow's {{ ds }} and
// {{ run_id }} and Dagster's {dataset}, {partition} and {run_id} are filled
// in; paths outside the test's directory (/run/lock, /var/log/idem,
// /airflow/xcom) are moved into it. Airflow, Dagster and nats-py are not
// installed: the .py files are byte-compiled, and their own logic (the
// deferrable trigger against the real API, the Dagster asset running the
// real binary, the sensor's results-to-materializations) runs under stub
// modules that stand in for those libraries (recipeHarness).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// recipe is one marked command.
type recipe struct {
	file, name string
	lang       string // md blocks: the fence's language
	text       string
}

func (r recipe) key() string { return r.file + ":" + r.name }

var (
	pyMarker = regexp.MustCompile(`^# recipe-shell: ([a-z0-9_]+)$`)
	pyConst  = regexp.MustCompile(`^[A-Z][A-Z0-9_]* = r"""(.*)$`)
	mdMarker = regexp.MustCompile(`^<!-- recipe-(shell|nats): ([a-z0-9_]+) -->$`)
	mdFence  = regexp.MustCompile("^```([a-z]+)$")
)

// readRecipes returns every marked command of docs/recipes/ and
// docs/SCHEDULERS.md by file:name.
func readRecipes(t *testing.T) map[string]recipe {
	t.Helper()
	files, err := filepath.Glob(repoPath(t, "docs/recipes/*"))
	require.NoError(t, err)
	files = append(files, repoPath(t, "docs/SCHEDULERS.md"))
	out := map[string]recipe{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		name := filepath.Base(f)
		var rs []recipe
		switch filepath.Ext(f) {
		case ".py":
			rs = pyRecipes(t, name, string(data))
		case ".md":
			rs = mdRecipes(t, name, string(data))
		default:
			continue
		}
		if name != "SCHEDULERS.md" {
			require.NotEmpty(t, rs, "%s marks no command", name)
		}
		for _, r := range rs {
			_, dup := out[r.key()]
			require.False(t, dup, "%s is marked twice", r.key())
			out[r.key()] = r
		}
	}
	return out
}

func pyRecipes(t *testing.T, file, src string) []recipe {
	lines := strings.Split(src, "\n")
	var out []recipe
	for i := 0; i < len(lines); i++ {
		m := pyMarker.FindStringSubmatch(lines[i])
		if m == nil {
			require.False(t, strings.HasPrefix(strings.TrimSpace(lines[i]), "# recipe-shell"),
				"%s:%d: a marker is `# recipe-shell: NAME` alone on its line", file, i+1)
			continue
		}
		require.Less(t, i+1, len(lines), "%s:%d: nothing after the marker", file, i+1)
		c := pyConst.FindStringSubmatch(lines[i+1])
		require.NotNil(t, c, "%s:%d: the marker must precede CONST = r\"\"\"...", file, i+2)
		text, rest := c[1], []string{}
		for j := i + 1; ; j++ {
			if k := strings.Index(text, `"""`); k >= 0 {
				rest = append(rest, text[:k])
				i = j
				break
			}
			rest = append(rest, text)
			require.Less(t, j+1, len(lines), "%s:%d: the string never ends", file, i+2)
			text = lines[j+1]
		}
		out = append(out, recipe{file: file, name: m[1], text: strings.Join(rest, "\n")})
	}
	return out
}

func mdRecipes(t *testing.T, file, src string) []recipe {
	lines := strings.Split(src, "\n")
	var out []recipe
	for i := 0; i < len(lines); i++ {
		m := mdMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		require.Less(t, i+1, len(lines))
		f := mdFence.FindStringSubmatch(lines[i+1])
		require.NotNil(t, f, "%s:%d: the marker must precede a fenced block", file, i+2)
		var body []string
		j := i + 2
		for ; j < len(lines) && lines[j] != "```"; j++ {
			body = append(body, lines[j])
		}
		require.Less(t, j, len(lines), "%s:%d: the block never ends", file, i+2)
		out = append(out, recipe{file: file, name: m[2], lang: f[1], text: strings.Join(body, "\n") + "\n"})
		i = j
	}
	return out
}

// render fills a recipe's placeholders and refuses one left unfilled.
func render(t *testing.T, r recipe, vars map[string]string) string {
	t.Helper()
	s := r.text
	for k, v := range vars {
		require.Contains(t, s, k, "%s has no %s", r.key(), k)
		s = strings.ReplaceAll(s, k, v)
	}
	require.NotRegexp(t, `\{\{|\{[a-z_]+\}`, s, "%s: a placeholder was not filled", r.key())
	return s
}

func airflowVars(ds string) map[string]string {
	return map[string]string{"{{ ds }}": ds, "{{ run_id }}": "scheduled__" + ds + "T00:00:00+00:00"}
}

// recipeEnv is where the recipes run: the built idem first on PATH, shims
// for date (cron's "yesterday") and logger, the config in IDEM_CONFIG.
type recipeEnv struct {
	dir    string
	env    []string
	logger string // what the logger shim was given, one call a line
}

func newRecipeEnv(t *testing.T, w *world, apiURL, token string) *recipeEnv {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.Symlink(idemBin, filepath.Join(bin, "idem")))
	realDate, err := exec.LookPath("date")
	require.NoError(t, err)
	for name, body := range map[string]string{
		"date": `#!/bin/sh
if [ "$*" = "-u -d yesterday +%F" ] && [ -n "$RECIPE_YESTERDAY" ]; then echo "$RECIPE_YESTERDAY"; exit 0; fi
exec ` + realDate + ` "$@"
`,
		"logger": `#!/bin/sh
printf '%s\n' "$*" >>"$RECIPE_LOGGER"
`,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755))
	}
	e := &recipeEnv{dir: dir, logger: filepath.Join(dir, "logger.log")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") && !strings.HasPrefix(kv, "PATH=") {
			e.env = append(e.env, kv)
		}
	}
	e.env = append(e.env, "PATH="+bin+":"+os.Getenv("PATH"), "IDEM_CONFIG="+w.cfg,
		"IDEM_API_URL="+apiURL, "IDEM_API_TOKEN="+token, "RECIPE_LOGGER="+e.logger)
	return e
}

type recipeOut struct {
	code           int
	stdout, stderr string
}

// last is the last stdout line, decoded as the one JSON object it must be.
func (o recipeOut) last(t *testing.T) map[string]any {
	t.Helper()
	return lastJSONLine(t, o.stdout, o.stderr)
}

func lastJSONLine(t *testing.T, out, why string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &v), "the last line is one JSON object: %q\n%s", out, why)
	return v
}

// run runs a script with argv[0..] (e.g. bash -c), env added, and returns
// what it did; a script still running after two minutes fails the test.
func (e *recipeEnv) run(t *testing.T, argv []string, script string, env ...string) recipeOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], script)...)
	cmd.Env = append(append([]string{}, e.env...), env...)
	cmd.Dir = e.dir
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "no exit within 2 minutes: %s\nstdout: %s\nstderr: %s", script, stdout.String(), stderr.String())
	o := recipeOut{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		o.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return o
}

// bash runs a script as the brief for a task's command has it: bash -c with
// pipefail, so a failing stage of a pipe fails the command.
func (e *recipeEnv) bash(t *testing.T, script string, env ...string) recipeOut {
	t.Helper()
	return e.run(t, []string{"bash", "-c"}, "set -o pipefail\n"+script, env...)
}

// pyCompile byte-compiles every .py recipe, its cache outside the tree.
func pyCompile(t *testing.T) {
	t.Helper()
	files, err := filepath.Glob(repoPath(t, "docs/recipes/*.py"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	cmd := exec.Command("python3", append([]string{"-m", "py_compile"}, files...)...)
	cmd.Env = append(os.Environ(), "PYTHONPYCACHEPREFIX="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "python3 -m py_compile: %s", out)
}

// needTools fails, naming the package, when a tool the recipes call is missing.
func needTools(t *testing.T) {
	t.Helper()
	for tool, pkg := range map[string]string{"python3": "python3", "bash": "bash", "curl": "curl", "jq": "jq", "flock": "util-linux"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the recipes run %s: apt-get install %s", tool, pkg)
	}
}

func TestRecipes(t *testing.T) {
	t.Parallel()
	needTools(t)
	rs := readRecipes(t)
	ran := map[string]bool{}
	get := func(key string) recipe {
		r, ok := rs[key]
		require.True(t, ok, "no recipe %s (markers found: %v)", key, keys(rs))
		ran[key] = true
		return r
	}

	t.Run("python compiles", func(t *testing.T) { pyCompile(t) })

	w := newWorld(t, opts{})
	const token = "recipes-read-token-5e0c"
	cfg, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	withToken := strings.Replace(string(cfg), "http:\n  addr: 127.0.0.1:0\n",
		"http:\n  addr: 127.0.0.1:0\n  token: "+token+"\n  token_for_reads: true\n", 1)
	require.NotEqual(t, string(cfg), withToken, "the harness's http block moved")
	require.NoError(t, os.WriteFile(w.cfg, []byte(withToken), 0o600))
	p := w.serve()
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()
	e := newRecipeEnv(t, w, "http://"+p.httpAddr(), token)
	loadedOnce := func(t *testing.T, runID string) {
		t.Helper()
		require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND status = 'success'", runID),
			"run %s loaded once", runID)
		require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND status NOT IN ('success', 'skipped')", runID))
	}
	rows := func(v map[string]any) any { r, _ := v["rows"].(map[string]any); return r["inserted"] }

	t.Run("airflow BashOperator: publish and wait, then its retry", func(t *testing.T) {
		cmd := render(t, get("airflow_dag.py:publish_wait"), airflowVars("2026-11-05"))
		o := e.bash(t, cmd)
		require.Equal(t, 0, o.code, o.stderr)
		last := o.last(t)
		require.Equal(t, "loaded", last["status"])
		require.Equal(t, "scheduled__2026-11-05T00:00:00+00:00", last["run_id"])
		require.EqualValues(t, 10, rows(last), "the XCom a downstream task reads")
		require.Contains(t, o.stderr, "loaded orders 2026-11-05", "progress goes to stderr, the task log")
		// Airflow's retry: the same command, the same run_id.
		o = e.bash(t, cmd)
		require.Equal(t, 0, o.code, o.stderr)
		require.Contains(t, []any{"loaded", "skipped"}, o.last(t)["status"])
		loadedOnce(t, "scheduled__2026-11-05T00:00:00+00:00")
	})

	t.Run("airflow KubernetesPodOperator: the wrapper writes return.json", func(t *testing.T) {
		r := get("airflow_dag.py:pod_wrapper")
		xcom := filepath.Join(e.dir, "xcom")
		ret := filepath.Join(xcom, "return.json")
		// The pod runs it with /bin/sh -c.
		cmd := render(t, r, airflowVars("2026-11-06"))
		o := e.run(t, []string{"/bin/sh", "-c"}, cmd, "IDEM_XCOM_DIR="+xcom)
		require.Equal(t, 0, o.code, o.stderr)
		require.Equal(t, "loaded", o.last(t)["status"])
		data, err := os.ReadFile(ret)
		require.NoError(t, err)
		require.Equal(t, strings.TrimRight(o.stdout, "\n"), strings.TrimRight(string(data), "\n"), "return.json is the last stdout line")
		require.Equal(t, "loaded", lastJSONLine(t, string(data), "return.json")["status"])
		// The retry, under bash this time.
		o = e.bash(t, cmd, "IDEM_XCOM_DIR="+xcom)
		require.Equal(t, 0, o.code, o.stderr)
		loadedOnce(t, "scheduled__2026-11-06T00:00:00+00:00")
		// A day without source rows: exit 1, and the XCom still written.
		require.NoError(t, os.Remove(ret))
		o = e.run(t, []string{"/bin/sh", "-c"}, render(t, r, airflowVars("2026-12-24")), "IDEM_XCOM_DIR="+xcom)
		require.Equal(t, 1, o.code, o.stderr)
		data, err = os.ReadFile(ret)
		require.NoError(t, err)
		require.Equal(t, "dead_lettered", lastJSONLine(t, string(data), "return.json")["status"])
	})

	t.Run("airflow deferrable: publish, then the API says success", func(t *testing.T) {
		vars := airflowVars("2026-11-07")
		o := e.bash(t, render(t, get("airflow_dag.py:publish_only"), vars))
		require.Equal(t, 0, o.code, o.stderr)
		require.Regexp(t, `^published orders 2026-11-07 run_id=scheduled__2026-11-07T00:00:00\+00:00 to idem.ready.orders: stream IDEM_EVENTS seq [1-9]\d*\n$`, o.stdout,
			"one line, the task's XCom")
		check := render(t, get("airflow_dag.py:status_check"), map[string]string{"{{ ds }}": "2026-11-07"})
		want := "success " + vars["{{ run_id }}"]
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			o := e.bash(t, check)
			if got := strings.TrimSpace(o.stdout); o.code == 0 && got == want {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the status check printed %q (exit %d), want %q\n%s", got, o.code, want, o.stderr)
			}
		}
		// Without the token the API refuses, curl -f fails, and pipefail
		// makes the whole command fail instead of printing jq's null.
		o = e.bash(t, check, "IDEM_API_TOKEN=")
		require.NotEqual(t, 0, o.code, o.stdout)
		require.Contains(t, o.stderr, "401")
	})

	t.Run("dagster: the asset's command", func(t *testing.T) {
		runID := "dagster__4e1f2c9a-0d1b-4c55-9b8e-5f2a7c1d3e60"
		cmd := render(t, get("dagster_assets.py:publish_wait"),
			map[string]string{"{dataset}": "orders", "{partition}": "2026-11-08", "{run_id}": runID})
		o := e.bash(t, cmd)
		require.Equal(t, 0, o.code, o.stderr)
		require.Equal(t, "loaded", o.last(t)["status"])
		require.EqualValues(t, 10, rows(o.last(t)))
		loadedOnce(t, runID)
	})

	t.Run("cron: the crontab line", func(t *testing.T) {
		shell, line := cronLine(t, get("cron.md:crontab"), e.dir)
		require.Equal(t, "/bin/bash", shell)
		log := filepath.Join(e.dir, "var-log-idem", "orders.log")
		require.NoError(t, os.MkdirAll(filepath.Dir(log), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(e.dir, "run-lock"), 0o755))
		cron := func(yesterday string) recipeOut {
			return e.run(t, []string{shell, "-c"}, line, "RECIPE_YESTERDAY="+yesterday)
		}
		loggerCalls := func() string { b, _ := os.ReadFile(e.logger); return string(b) }

		// Loaded: nothing printed, so cron mails nothing; the log ends with the JSON.
		o := cron("2026-11-09")
		require.Equal(t, 0, o.code, "%s\n%s", o.stdout, o.stderr)
		require.Empty(t, o.stdout+o.stderr, "a load that worked prints nothing")
		data, err := os.ReadFile(log)
		require.NoError(t, err)
		require.Equal(t, "loaded", lastJSONLine(t, string(data), "the log")["status"])
		require.Empty(t, loggerCalls())
		o = cron("2026-11-09")
		require.Equal(t, 0, o.code, "%s\n%s", o.stdout, o.stderr)
		loadedOnce(t, "cron__2026-11-09")

		// The previous run still holds the lock: 75, logged and mailed, nothing published.
		lock, err := os.OpenFile(filepath.Join(e.dir, "run-lock", "idem-orders.lock"), os.O_CREATE|os.O_RDWR, 0o644)
		require.NoError(t, err)
		require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
		before := w.count("SELECT count(*) FROM idem.pipeline_audit")
		events := eventsStored(t, w)
		o = cron("2026-11-12")
		require.NoError(t, lock.Close())
		require.Equal(t, 75, o.code, "%s\n%s", o.stdout, o.stderr)
		require.Contains(t, o.stdout, "idem publish orders 2026-11-12: exit 75")
		require.Contains(t, loggerCalls(), "-t idem-orders -p user.err idem publish orders 2026-11-12: exit 75")
		require.Equal(t, events, eventsStored(t, w), "nothing published")
		require.Equal(t, before, w.count("SELECT count(*) FROM idem.pipeline_audit"))

		// A day without source rows: dead-lettered, exit 1; the mail ends with idem's JSON.
		o = cron("2026-12-25")
		require.Equal(t, 1, o.code, "%s\n%s", o.stdout, o.stderr)
		require.Contains(t, loggerCalls(), "idem publish orders 2026-12-25: exit 1")
		require.Equal(t, "dead_lettered", o.last(t)["status"])
		require.Equal(t, "cron__2026-12-25", o.last(t)["run_id"])
	})

	t.Run("cron: catching up a day by hand", func(t *testing.T) {
		o := e.bash(t, get("cron.md:catch_up").text)
		require.Equal(t, 0, o.code, o.stderr)
		require.Equal(t, "loaded", o.last(t)["status"])
		loadedOnce(t, "cron__2026-11-20")
	})

	t.Run("python: the deferrable trigger against the API", func(t *testing.T) {
		h := newRecipeHarness(t, e)
		ev := h.call(t, "trigger", "http://"+p.httpAddr(), "orders", "2026-11-07", "scheduled__2026-11-07T00:00:00+00:00")
		require.Equal(t, "airflow_dag.IdemPartitionTrigger", ev["classpath"])
		require.Equal(t, true, ev["resolves"], "the triggerer can import the classpath")
		event := ev["event"].(map[string]any)
		require.Equal(t, "success", event["status"])
		require.EqualValues(t, 10, rows(event))
		// Another run's success does not end this run's wait: a run that
		// never published times out.
		ev = h.call(t, "trigger", "http://"+p.httpAddr(), "orders", "2026-11-07", "scheduled__never", "--within", "2")
		require.Equal(t, "timeout", ev["event"])
		// Dead-lettered by this run (the cron subtest's day without rows).
		ev = h.call(t, "trigger", "http://"+p.httpAddr(), "orders", "2026-12-25", "cron__2026-12-25")
		event = ev["event"].(map[string]any)
		require.Equal(t, "dead_lettered", event["status"])
		require.Equal(t, "fatal", event["error_kind"])
		// A wrong token is an error event, not a wait without end.
		ev = h.call(t, "trigger", "http://"+p.httpAddr(), "orders", "2026-11-07", "x", "--token", "wrong-token-000000000")
		event = ev["event"].(map[string]any)
		require.Equal(t, "error", event["status"])
		require.Contains(t, event["error"], "401")

		for _, c := range []struct{ payload, want string }{
			{`{"status": "success", "run_id": "r"}`, "returned"},
			{`{"status": "dead_lettered", "run_id": "r", "error": "empty_source"}`, "AirflowFailException"},
			{`{"status": "rejected", "run_id": "r", "error": "check_failed: unique"}`, "AirflowFailException"},
			{`{"status": "error", "run_id": "r", "error": "401"}`, "AirflowException"},
		} {
			got := h.call(t, "complete", c.payload)
			require.Equal(t, c.want, got["outcome"], "execute_complete(%s)", c.payload)
		}
	})

	t.Run("python: the dagster asset and the sensor's materializations", func(t *testing.T) {
		h := newRecipeHarness(t, e)
		got := h.call(t, "asset", "2026-11-10", "run-a", "")
		require.Equal(t, "MaterializeResult", got["outcome"], "%v", got)
		md := got["kwargs"].(map[string]any)["metadata"].(map[string]any)
		require.Equal(t, "loaded", md["status"])
		require.Equal(t, "dagster__run-a", md["run_id"])
		require.EqualValues(t, 10, md["rows_inserted"])
		// A re-execution of that run (root run run-a): the same run_id, one load.
		got = h.call(t, "asset", "2026-11-10", "run-b", "run-a")
		require.Equal(t, "MaterializeResult", got["outcome"], "%v", got)
		loadedOnce(t, "dagster__run-a")
		// Failed for good: Failure without retries, idem's JSON attached.
		got = h.call(t, "asset", "2026-12-26", "run-c", "")
		require.Equal(t, "Failure", got["outcome"], "%v", got)
		kw := got["kwargs"].(map[string]any)
		require.Equal(t, false, kw["allow_retries"])
		require.EqualValues(t, 1, kw["metadata"].(map[string]any)["exit_code"])
		require.Contains(t, kw["description"], "dead_lettered")

		// The sensor's conversion, on what the results stream holds now.
		w.waitCount(0, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL")
		res := resultsOf(t, w)
		body, err := json.Marshal(res)
		require.NoError(t, err)
		mats := h.callList(t, string(body), "materializations")
		var want []string
		for _, r := range res {
			if r.Status == "loaded" {
				want = append(want, fmt.Sprintf("%s %s %d", r.Partition, r.RunID, r.Rows.Inserted))
			}
		}
		var gotMats []string
		for _, m := range mats {
			md := m["metadata"].(map[string]any)
			gotMats = append(gotMats, fmt.Sprintf("%s %s %v", m["partition"], md["run_id"], md["rows_inserted"]))
		}
		require.Equal(t, want, gotMats, "one materialization per loaded result, with its partition and rows")
		require.Len(t, gotMats, 7)
	})

	for k := range rs {
		if !strings.HasPrefix(k, "SCHEDULERS.md:") {
			require.True(t, ran[k], "recipe %s is marked but no subtest runs it", k)
		}
	}
}

// eventsStored counts the events stream's messages.
func eventsStored(t *testing.T, w *world) uint64 {
	t.Helper()
	s, err := w.js.Stream(t.Context(), "IDEM_EVENTS")
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	return info.State.Msgs
}

// cronLine reads a crontab block: its SHELL, and the command of its one
// schedule line as cron hands it to the shell (\% is %), with /run/lock/ and
// /var/log/idem/ moved under dir.
func cronLine(t *testing.T, r recipe, dir string) (shell, cmd string) {
	t.Helper()
	require.Equal(t, "crontab", r.lang)
	shell = "/bin/sh" // cron's default
	sched := regexp.MustCompile(`^(\S+\s+){5}(.+)$`)
	sc := bufio.NewScanner(strings.NewReader(r.text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		case regexp.MustCompile(`^[A-Z_]+=`).MatchString(line):
			if v, ok := strings.CutPrefix(line, "SHELL="); ok {
				shell = v
			}
		default:
			m := sched.FindStringSubmatch(line)
			require.NotNil(t, m, "not a schedule line: %s", line)
			require.Empty(t, cmd, "one schedule line per block")
			cmd = m[2]
		}
	}
	require.NotEmpty(t, cmd)
	require.NotRegexp(t, `(^|[^\\])%`, cmd, "cron turns a bare % into a newline: write \\%")
	cmd = strings.ReplaceAll(cmd, `\%`, "%")
	for from, to := range map[string]string{"/run/lock/": "run-lock/", "/var/log/idem/": "var-log-idem/"} {
		require.Contains(t, cmd, from)
		cmd = strings.ReplaceAll(cmd, from, filepath.Join(dir, to)+"/")
	}
	return shell, cmd
}

// recipeHarness imports the .py recipes with stand-ins for Airflow,
// Dagster, Kubernetes, pendulum and nats-py (none is installed here) and
// calls their own functions: what py_compile cannot see.
type recipeHarness struct {
	e    *recipeEnv
	path string
}

func newRecipeHarness(t *testing.T, e *recipeEnv) *recipeHarness {
	t.Helper()
	path := filepath.Join(t.TempDir(), "harness.py")
	require.NoError(t, os.WriteFile(path, []byte(harnessPy), 0o644))
	return &recipeHarness{e: e, path: path}
}

func (h *recipeHarness) exec(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", append([]string{h.path, repoPath(t, "docs/recipes")}, args...)...)
	cmd.Env = append(append([]string{}, h.e.env...), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "harness %v:\n%s\n%s", args, stdout.String(), stderr.String())
	return lastLine(stdout.String())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func (h *recipeHarness) call(t *testing.T, args ...string) map[string]any {
	t.Helper()
	var v map[string]any
	out := h.exec(t, "", args...)
	require.NoError(t, json.Unmarshal([]byte(out), &v), "%s", out)
	return v
}

func (h *recipeHarness) callList(t *testing.T, stdin string, args ...string) []map[string]any {
	t.Helper()
	var v []map[string]any
	out := h.exec(t, stdin, args...)
	require.NoError(t, json.Unmarshal([]byte(out), &v), "%s", out)
	return v
}

// harnessPy stands in for the libraries the recipes import: every name of
// airflow, dagster, kubernetes, pendulum and nats is a class that accepts
// any call (a decorator with arguments gives the function back), is an
// exception (so Failure and AirflowFailException can be raised) and keeps
// its arguments for the test to read.
const harnessPy = `
import argparse, asyncio, importlib, importlib.abc, importlib.machinery, json, os, sys, types

STUBBED = {"airflow", "dagster", "kubernetes", "pendulum", "nats"}

class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Any()

class Any(Exception, metaclass=_Meta):
    def __init__(self, *args, **kwargs):
        Exception.__init__(self, *args)
        self.kwargs = kwargs
    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]
        return Any(*args, **kwargs)
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Any()
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False
    def __rshift__(self, other):
        return other

class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None
    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        names = {}
        def attr(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return names.setdefault(name, type(name, (Any,), {}))
        m.__getattr__ = attr
        return m
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _Stubs())
sys.path.insert(0, sys.argv[1])

def plain(v):
    if isinstance(v, Any):
        return {"class": type(v).__name__, "args": [plain(a) for a in v.args], "kwargs": plain(v.kwargs)}
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v

def out(v):
    print(json.dumps(plain(v), default=str))

mode, args = sys.argv[2], sys.argv[3:]
if mode == "trigger":
    p = argparse.ArgumentParser()
    p.add_argument("url"); p.add_argument("dataset"); p.add_argument("partition"); p.add_argument("run_id")
    p.add_argument("--within", type=float, default=60); p.add_argument("--token")
    a = p.parse_args(args)
    if a.token:
        os.environ["IDEM_API_TOKEN"] = a.token
    import airflow_dag
    trig = airflow_dag.IdemPartitionTrigger(a.url, a.dataset, a.partition, a.run_id, poll_interval=0.2)
    classpath, kwargs = trig.serialize()
    mod, _, cls = classpath.rpartition(".")
    resolves = getattr(importlib.import_module(mod), cls) is airflow_dag.IdemPartitionTrigger
    again = airflow_dag.IdemPartitionTrigger(**kwargs)
    async def first():
        async for ev in again.run():
            return ev.args[0]
    try:
        event = asyncio.run(asyncio.wait_for(first(), a.within))
    except asyncio.TimeoutError:
        event = "timeout"
    out({"classpath": classpath, "resolves": resolves, "event": event})
elif mode == "complete":
    import airflow_dag
    op = airflow_dag.IdemPartitionSensor(task_id="t", dataset="orders", partition="2026-11-01", run_id="r", api_url="http://x")
    try:
        op.execute_complete({}, json.loads(args[0]))
        out({"outcome": "returned"})
    except Exception as e:
        out({"outcome": type(e).__name__, "message": str(e)})
elif mode == "asset":
    import dagster_assets
    partition, run_id, root = args
    ctx = types.SimpleNamespace(partition_key=partition, run_id=run_id,
                                run=types.SimpleNamespace(root_run_id=root or None), log=Any())
    try:
        r = dagster_assets.orders(ctx)
        out({"outcome": type(r).__name__, "kwargs": r.kwargs})
    except Exception as e:
        out({"outcome": type(e).__name__, "kwargs": e.kwargs})
elif mode == "materializations":
    import dagster_assets
    out([m.kwargs for m in dagster_assets.materializations(json.load(sys.stdin))])
else:
    sys.exit("unknown mode " + mode)
`

// natsViolations collects the permission violations a nats-server logs.
type natsViolations struct {
	mu    sync.Mutex
	lines []string
}

func (v *natsViolations) Errorf(format string, a ...any) {
	if s := fmt.Sprintf(format, a...); strings.Contains(s, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, s)
		v.mu.Unlock()
	}
}
func (v *natsViolations) Noticef(string, ...any) {}
func (v *natsViolations) Warnf(string, ...any)   {}
func (v *natsViolations) Fatalf(string, ...any)  {}
func (v *natsViolations) Debugf(string, ...any)  {}
func (v *natsViolations) Tracef(string, ...any)  {}

func (v *natsViolations) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.lines
	v.lines = nil
	return out
}

// TestRecipesWaiterPermissions: the NATS permissions docs/SCHEDULERS.md
// gives a waiting publisher, as written, are enough for the Airflow
// recipe's `idem publish --wait` and cause no violation; a plain
// publisher's (publish idem.ready.>, subscribe _INBOX.>) are not, and the
// wait says so before publishing anything.
func TestRecipesWaiterPermissions(t *testing.T) {
	t.Parallel()
	needTools(t)
	rs := readRecipes(t)
	perms, ok := rs["SCHEDULERS.md:waiting_publisher"]
	require.True(t, ok, "docs/SCHEDULERS.md marks no waiting_publisher block")
	require.Equal(t, "conf", perms.lang)
	pw := map[string]string{"admin": "admin-pw-3f1c", "waiter": "waiter-pw-8a2d", "publisher": "publisher-pw-61be"}
	conf := perms.text + fmt.Sprintf(`
authorization {
  users = [
    {user: admin, password: %q, permissions: {publish: ">", subscribe: ">"}}
    {user: waiter, password: %q, permissions: $WAITING_PUBLISHER}
    {user: publisher, password: %q, permissions: {publish: {allow: ["idem.ready.>"]}, subscribe: {allow: ["_INBOX.>"]}}}
  ]
}
`, pw["admin"], pw["waiter"], pw["publisher"])
	dir := t.TempDir()
	ns := startNATSConf(t, dir, conf)
	violations := &natsViolations{}
	ns.SetLogger(violations, false, false)
	w := securedWorld(t, ns, []nats.Option{nats.UserInfo("admin", pw["admin"])}, "", nil, "")
	as := func(user string) []string {
		return []string{"IDEM_NATS_USER=" + user, "IDEM_NATS_PASSWORD=" + pw[user]}
	}
	code, out := runIdem(t, as("admin"), "streams", "--config", w.cfg)
	require.Equal(t, 0, code, out)
	p := w.serve(as("admin")...)
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()
	e := newRecipeEnv(t, w, "http://"+p.httpAddr(), "")
	// A pull the user may not make is not an error the client sees: the
	// wait would sit out its 30m. The last --timeout wins, so the test's
	// bounds it.
	cmd := render(t, rs["airflow_dag.py:publish_wait"], airflowVars("2026-11-11")) + " --timeout 60s"

	o := e.bash(t, cmd, as("waiter")...)
	require.Empty(t, violations.take(), "the documented permissions are all the wait uses")
	require.Equal(t, 0, o.code, o.stderr)
	require.Equal(t, "loaded", o.last(t)["status"])
	o = e.bash(t, cmd, as("waiter")...) // a retry follows the same event
	require.Empty(t, violations.take())
	require.Equal(t, 0, o.code, o.stderr)

	before := eventsStored(t, w)
	o = e.bash(t, render(t, rs["airflow_dag.py:publish_wait"], airflowVars("2026-11-12")), as("publisher")...)
	require.Equal(t, 4, o.code, o.stderr)
	require.Contains(t, o.stderr, "$JS.API.STREAM.INFO.IDEM_RESULTS")
	require.Equal(t, before, eventsStored(t, w), "an event nobody can follow is not published")
	require.NotEmpty(t, violations.take())
}
