package e2e

// Every operator command we document, run: the `idem ...` commands of the
// alert rules' runbooks (deploy/prometheus/idem-alerts.yaml), of docs/OPERATING.md's
// "At 3 a.m." section and of the status page, each against a running `idem
// serve` in a fixture where it means something, as a child process.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
)

// rbCommand is one documented command, as written.
type rbCommand struct {
	source string // where it is written: file and line, or alert, or page
	text   string // the command line, comment removed
	// labels are the alert labels {{ $labels.X }} stands for (alert runbooks).
	labels map[string]string
	// seqKind is the kind of dead letter SEQ stands for: the --kind its
	// runbook names (`idem dlq ls --kind fatal`, `idem dlq show SEQ`), or any.
	seqKind string
}

// rbPlaceholders: what DATASET and DAY stand for (SEQ is looked up when its
// command runs). DAY is a partition the fixture loaded.
var rbPlaceholders = map[string]string{"DATASET": "orders", "DAY": "2026-11-02"}

// rbExit1 lists the commands whose documented exit code 1 means "the thing
// asked about is not ok" rather than "the command failed", with the summary
// line each prints once it has answered (with --json, valid JSON will do):
// exit 1 without it (a connection refused, a dead letter not found) is still
// a failure. Everything else must exit 0; exit 2 (usage) never passes.
var rbExit1 = []struct {
	prefix  string
	summary *regexp.Regexp
}{
	// "Exit code 1 when any partition in the range is not success."
	{"audit status", regexp.MustCompile(`(?m)^\d+ partition\(s\), \d+ not loaded$`)},
	// "Exit code 1 when any is missing or late, 0 when none is."
	{"audit missing", regexp.MustCompile(`(?m)^\d+ of \d+ (expected partition\(s\) of \S+ not loaded|partition\(s\) missing for )`)},
	// Not here: dlq replay (exit 1 = a dead letter was not replayed) and
	// backfill --wait (exit 1 = a partition failed): in this fixture every
	// replay is stored and every partition backfilled has source rows.
}

func TestRunbookCommandsRun(t *testing.T) {
	t.Parallel()
	readme := rbReadmeCommands(t, rbRepoFile(t, rbRunbookDoc))
	alerts := rbAlertCommands(t, rbRepoFile(t, "deploy/prometheus/idem-alerts.yaml"))
	require.NotEmpty(t, readme, "no idem command found in "+rbRunbookDoc+"'s At 3 a.m. section: is the extractor broken?")
	require.NotEmpty(t, alerts, "no idem command found in the runbooks of idem-alerts.yaml: is the extractor broken?")

	// Each source runs in order, in a fixture of its own: the runbook's
	// `idem dlq show 3` needs the fixture's dead letter 3 before any replay,
	// and the runbooks' `idem audit missing` partitions still missing.
	for _, src := range []struct {
		name string
		cmds func(t *testing.T, p *proc) []rbCommand
	}{
		{"OPERATING", func(*testing.T, *proc) []rbCommand { return readme }},
		{"alerts", func(*testing.T, *proc) []rbCommand { return alerts }},
		{"status page", func(t *testing.T, p *proc) []rbCommand { return rbPageCommands(t, "http://"+p.httpAddr()) }},
	} {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			w, p := rbFixture(t)
			cmds := src.cmds(t, p)
			t.Logf("%d commands from %s", len(cmds), src.name)
			for _, c := range cmds {
				t.Logf("  %s: %s", c.source, c.text)
			}
			backfilled := false
			for _, c := range cmds {
				args := rbRunDocumented(t, w, c)
				backfilled = backfilled || args[0] == "backfill" && rbHas(args, "--wait")
			}
			if backfilled && !t.Failed() {
				// A backfill --wait that exited 0 loaded November, 11-04
				// after its exhausted attempts included.
				w.waitSettled()
				require.EqualValues(t, 30, w.count(`SELECT count(DISTINCT partition_key) FROM idem.pipeline_audit
					WHERE task_id = 'orders' AND status = 'success' AND partition_key BETWEEN '2026-11-01' AND '2026-11-30'`))
			}
		})
	}
}

// rbFixture: orders with a calendar from 2026-11-01 (due 6 h after each day),
// idem serve running, dead letters 1 (fatal), 2 (exhausted) and 3 (fatal),
// all of orders, and November's 01-03, 05, 06 and 26 loaded.
func rbFixture(t *testing.T) (*world, *proc) {
	t.Helper()
	// retries 1 and a 1 s statement timeout: a load that waits for a lock
	// is exhausted after two attempts.
	w := newWorld(t, opts{retries: 1, timeout: "1s",
		orderFields: "    expect: {every: day, from: 2026-11-01, deadline: 6h}\n"})
	// A backfill over the calendar (no --from) reaches the last day that has
	// ended: give every day after November source rows too, up to today.
	w.db.Exec(t, `INSERT INTO staging.src
		SELECT d * 1000 + i, date '2026-11-01' + d, i * 1.5, 'row ' || i
		  FROM generate_series(30, (now() AT TIME ZONE 'UTC')::date - date '2026-11-01' + 1) d, generate_series(1, 10) i`)
	p := w.serve()

	// 1: fatal, empty_source (no rows for 2030).
	w.publish("2030-01-01", "scheduled__2030-01-01", nil)
	w.waitDeadLetters(1)
	// 2: exhausted, the target locked through both attempts.
	ctx := context.Background()
	tx, err := w.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE analytics.t IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	w.publish("2026-11-04", "scheduled__2026-11-04", nil)
	w.waitDeadLetters(2)
	require.NoError(t, tx.Rollback(ctx))
	// 3: fatal again.
	w.publish("2030-01-02", "scheduled__2030-01-02", nil)
	w.waitDeadLetters(3)

	loaded := []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-05", "2026-11-06", "2026-11-26"}
	for _, d := range loaded {
		w.publish(d, "scheduled__"+d, nil)
	}
	w.waitCount(int64(len(loaded)), "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitSettled()

	dls := w.deadLetters()
	require.Len(t, dls, 3)
	for i, kind := range []string{"fatal", "exhausted", "fatal"} {
		require.EqualValues(t, i+1, dls[i].Sequence)
		require.Equal(t, "orders", dls[i].Header.Get(deadletter.HeaderDataset))
		require.Equal(t, kind, dls[i].Header.Get(deadletter.HeaderErrorKind), "dead letter %d", i+1)
	}
	return w, p
}

func rbRepoFile(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", rel))
	require.NoError(t, err)
	return p
}

// rbRunbookDoc is the page whose "## At 3 a.m." section the alert runbooks
// name.
const rbRunbookDoc = "docs/OPERATING.md"

// rbReadmeCommands: every line starting with "idem " in the ```sh blocks of
// rbRunbookDoc's "## At 3 a.m." section, up to the next "## " heading.
func rbReadmeCommands(t *testing.T, path string) []rbCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []rbCommand
	in, found, fence := false, false, ""
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## At 3 a.m."):
			in, found = true, true
			continue
		case strings.HasPrefix(line, "## "):
			in = false
		}
		if !in {
			continue
		}
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if fence == "" {
				fence = strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
				if fence == "" {
					fence = "text"
				}
			} else {
				fence = ""
			}
			continue
		}
		if fence == "sh" && strings.HasPrefix(trimmed, "idem ") {
			out = append(out, rbCommand{source: fmt.Sprintf("%s:%d", rbRunbookDoc, n), text: rbStripComment(trimmed)})
		}
	}
	require.NoError(t, sc.Err())
	require.True(t, found, rbRunbookDoc+" has no \"## At 3 a.m.\" section")
	require.Empty(t, fence, rbRunbookDoc+"'s At 3 a.m. section has an unclosed code block")
	return out
}

// rbStripComment removes a shell comment: from an unquoted # that starts a word.
func rbStripComment(s string) string {
	var quote rune
	prev := ' '
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return strings.TrimSpace(s[:i])
		}
		prev = r
	}
	return strings.TrimSpace(s)
}

var rbBackquoted = regexp.MustCompile("`([^`]*)`")

// rbAlertCommands: every backquoted segment starting with "idem " of each
// alert's runbook annotation.
func rbAlertCommands(t *testing.T, path string) []rbCommand {
	t.Helper()
	var out []rbCommand
	for _, r := range readRules(t, path) {
		runbook := r.Annotations["runbook"]
		// The labels an alert of this rule would carry; kind is one the
		// fixture's DLQ holds.
		labels := map[string]string{"dataset": "orders", "kind": "exhausted"}
		seqKind := ""
		if k := rbKind.FindStringSubmatch(rbFill(runbook, labels)); k != nil {
			seqKind = k[1]
		}
		for _, m := range rbBackquoted.FindAllStringSubmatch(runbook, -1) {
			if strings.HasPrefix(m[1], "idem ") {
				out = append(out, rbCommand{source: "idem-alerts.yaml " + r.Alert, text: strings.TrimSpace(m[1]),
					labels: labels, seqKind: seqKind})
			}
		}
	}
	return out
}

var rbPageCommand = regexp.MustCompile(`idem (dlq|audit|backfill|publish|streams|validate|migrate)\b[^<]*`)

// rbPageCommands: anything that looks like an idem command on the status
// pages a running serve answers (none today; one added later is run too).
func rbPageCommands(t *testing.T, base string) []rbCommand {
	t.Helper()
	var out []rbCommand
	for _, path := range []string{"/", "/dead-letters"} {
		code, body := get(t, base+path)
		require.Equal(t, 200, code, "GET %s: %s", path, body)
		require.Contains(t, body, "<html", "GET %s is not the status page", path)
		for _, m := range rbPageCommand.FindAllString(body, -1) {
			text := strings.Join(strings.Fields(html.UnescapeString(m)), " ")
			out = append(out, rbCommand{source: "status page " + path, text: rbStripComment(text),
				labels: map[string]string{"dataset": "orders", "kind": "exhausted"}})
		}
	}
	return out
}

var (
	rbLabel = regexp.MustCompile(`\{\{\s*\$labels\.(\w+)\s*\}\}`)
	rbWord  = regexp.MustCompile(`\b(DATASET|DAY|SEQ)\b`)
	rbKind  = regexp.MustCompile(`--kind[ =](\w+)`)
)

// rbFill replaces each {{ $labels.X }} of s with labels[X].
func rbFill(s string, labels map[string]string) string {
	return rbLabel.ReplaceAllStringFunc(s, func(m string) string { return labels[rbLabel.FindStringSubmatch(m)[1]] })
}

// rbRunDocumented fills in c's placeholders, runs it when the previous
// commands' effects have settled, and checks its exit code.
func rbRunDocumented(t *testing.T, w *world, c rbCommand) []string {
	t.Helper()
	w.waitSettled() // what the previous command published has loaded or is a dead letter
	for _, m := range rbLabel.FindAllStringSubmatch(c.text, -1) {
		_, ok := c.labels[m[1]]
		require.True(t, ok, "%s: `%s` uses {{ $labels.%s }}, which this test does not fill in", c.source, c.text, m[1])
	}
	text := rbFill(c.text, c.labels)
	text = rbWord.ReplaceAllStringFunc(text, func(m string) string {
		if m != "SEQ" {
			return rbPlaceholders[m]
		}
		// A dead letter of orders in the DLQ now, of the kind the
		// command's alert is about when its runbook names one.
		return fmt.Sprint(rbDeadLetterSeq(t, w, "orders", c.seqKind))
	})
	args, err := rbSplit(text)
	require.NoError(t, err, "%s: `%s`", c.source, c.text)
	require.Equal(t, "idem", args[0])
	args = args[1:]
	require.NotEmpty(t, args, "%s: `%s` has no subcommand", c.source, c.text)
	require.NotContains(t, args, "--", "%s: `%s`: --config would be an argument", c.source, c.text)
	// --wait follows the loads for an hour by default; the test's budget is shorter.
	if rbHas(args, "--wait") && !rbHas(args, "--timeout") {
		args = append(args, "--timeout", "45s")
	}
	code, stdout, stderr := rbExec(t, w, args)
	t.Logf("%s: idem %s: exit %d: %s", c.source, strings.Join(args, " "), code, rbLastLine(stdout))
	ok := code == 0
	if code == 1 {
		for _, e := range rbExit1 {
			answered := e.summary.MatchString(stdout) || rbHas(args, "--json") && json.Valid([]byte(stdout))
			if strings.HasPrefix(strings.Join(args, " "), e.prefix+" ") && answered {
				ok = true
			}
		}
	}
	if !ok {
		t.Errorf("%s: `%s` (run as: idem %s --config %s) failed with exit code %d\nstdout:\n%s\nstderr:\n%s",
			c.source, c.text, strings.Join(args, " "), w.cfg, code, stdout, stderr)
		return args
	}
	// `idem dlq replay SEQ` that exited 0 took SEQ out of the DLQ.
	if len(args) > 2 && args[0] == "dlq" && args[1] == "replay" && !strings.HasPrefix(args[2], "-") && !rbHas(args, "--dry-run") {
		for _, dl := range w.deadLetters() {
			if fmt.Sprint(dl.Sequence) == args[2] {
				t.Errorf("%s: `%s` exited 0 and left dead letter %d in the DLQ", c.source, c.text, dl.Sequence)
			}
		}
	}
	return args
}

// rbLastLine is the last line of out: the summary most commands end with.
func rbLastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

func rbHas(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// rbDeadLetterSeq is the stream sequence of the oldest dead letter of dataset
// (of kind, unless "") in the DLQ.
func rbDeadLetterSeq(t *testing.T, w *world, dataset, kind string) uint64 {
	t.Helper()
	var dls []*jetstream.RawStreamMsg
	for _, dl := range w.deadLetters() {
		if dl.Header.Get(deadletter.HeaderDataset) == dataset && (kind == "" || dl.Header.Get(deadletter.HeaderErrorKind) == kind) {
			dls = append(dls, dl)
		}
	}
	require.NotEmpty(t, dls, "no dead letter of %s (kind %q) in the DLQ to fill in SEQ", dataset, kind)
	return dls[0].Sequence
}

// rbSplit splits a command line as a shell would, for what documented
// commands use: words, '...' and "..." (no escapes). Anything else a shell
// would expand or interpret is refused, so such a command cannot be run
// differently here than at a prompt.
func rbSplit(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("\\$`|&;<>(){}*?[]!~", r), r == '#' && !inWord:
			return nil, fmt.Errorf("%q: %q is a shell metacharacter this test does not interpret", s, r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("%q: unterminated %c", s, quote)
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("empty command")
	}
	return words, nil
}

// rbExec runs idem args --config <the world's> with a deadline and returns
// its exit code and output.
func rbExec(t *testing.T, w *world, args []string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemBin, append(args, "--config", w.cfg)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, stdout.String(), stderr.String() + "\n(killed: no exit within 60s)"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stdout.String(), stderr.String()
}
