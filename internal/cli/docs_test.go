package cli

// The docs' commands, checked against the CLI and the Makefile without
// running them, and the docs' links, checked against the repository.
//
// Every shell block (```sh, ```bash, ```shell, ```console or a bare ```) of
// the pages in docsCommandPages is read line by line: a line that starts
// with `idem ` must name a subcommand path of the tree newRoot builds (the
// one the binary runs), with flags that command defines and the number of
// positional arguments it takes (DATASET, SEQ and the like are positional
// arguments like any other); a line that starts with `make ` must name
// targets of the Makefile. Every relative link of every markdown file of
// the repository must name a file that exists, and an anchor a heading of
// that file; no link may leave the repository.

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/config"
)

// docsRoot is the repository, from this package's directory.
const docsRoot = "../.."

// docsCommandPages are the pages whose shell blocks must run as written:
// the README and the pages organised by task.
var docsCommandPages = []string{
	"README.md",
	"docs/GETTING-STARTED.md",
	"docs/STRATEGIES.md",
	"docs/PIPELINES.md",
	"docs/OPERATING.md",
	"docs/RUNNING.md",
	"docs/UPGRADES.md",
	"docs/SCHEDULERS.md",
	"docs/SOURCES.md",
	"docs/DEVELOPMENT.md",
	"docs/RELIABILITY.md",
	"docs/POOLERS.md",
	"docs/SECURITY.md",
}

// docsLinkBase names the markdown sources whose links resolve from another
// file (a source rendered into a page elsewhere): none at present.
var docsLinkBase = map[string]string{}

// docLine is one command line of a page, with where it is written.
type docLine struct {
	where string // file:line
	text  string // the command, comment and prompt removed, continuations joined
}

// shellFences are the info strings of the blocks whose lines are commands.
var shellFences = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}

// docsShellLines returns every line of md's shell blocks that starts with
// "idem " or "make " (after a console prompt "$ " and leading VAR=value
// assignments), comments removed and backslash continuations joined.
func docsShellLines(name, md string) []docLine {
	var out []docLine
	inFence, shell, console := false, false, false
	var pending *docLine
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			if !inFence {
				info := strings.TrimSpace(strings.TrimLeft(line, "`"))
				if f := strings.Fields(info); len(f) > 0 {
					info = f[0]
				}
				inFence, shell, console = true, shellFences[info], info == "console"
			} else {
				inFence, shell, console = false, false, false
			}
			continue
		}
		if !inFence || !shell {
			continue
		}
		if pending != nil {
			pending.text += " " + line
		} else {
			l := line
			if console {
				// A console block shows output too: commands have a prompt.
				var ok bool
				if l, ok = strings.CutPrefix(line, "$ "); !ok {
					continue
				}
			}
			l = stripAssignments(l)
			if !strings.HasPrefix(l, "idem ") && !strings.HasPrefix(l, "make ") && l != "make" {
				continue
			}
			pending = &docLine{where: fmt.Sprintf("%s:%d", name, n), text: l}
		}
		if strings.HasSuffix(pending.text, `\`) {
			pending.text = strings.TrimSpace(strings.TrimSuffix(pending.text, `\`))
			continue
		}
		pending.text = stripShellComment(pending.text)
		out = append(out, *pending)
		pending = nil
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*\s+`)

// stripAssignments removes the environment assignments before a command.
func stripAssignments(s string) string {
	for {
		loc := assignment.FindStringIndex(s)
		if loc == nil {
			return s
		}
		s = s[loc[1]:]
	}
}

// stripShellComment removes a comment: from an unquoted # that starts a word.
func stripShellComment(s string) string {
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

// shellWords splits a command line as a shell would, up to the first
// unquoted pipe, list operator or redirection: quotes are removed, what is
// inside them kept as one word.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
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
		case r == '|' || r == ';' || r == '&' || r == '>' || r == '<':
			flush()
			return words, nil
		case unicode.IsSpace(r):
			flush()
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c quote", quote)
	}
	flush()
	return words, nil
}

// checkIdemLine checks one `idem ...` line against the command tree the
// binary builds: its subcommand path, its flags and its arguments.
func checkIdemLine(line string) error {
	words, err := shellWords(line)
	if err != nil {
		return err
	}
	if len(words) == 0 || words[0] != "idem" {
		return fmt.Errorf("not an idem command")
	}
	root := newRoot(&env{out: io.Discard, errOut: io.Discard, getenv: func(string) string { return "" }})
	args := words[1:]
	if len(args) == 0 {
		return nil
	}
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if help, _ := cmd.Flags().GetBool("help"); help {
		return nil
	}
	positional := cmd.Flags().Args()
	if cmd.HasSubCommands() && len(positional) > 0 && !cmd.Runnable() {
		return fmt.Errorf("%s has no subcommand %q", cmd.CommandPath(), positional[0])
	}
	if err := cmd.ValidateArgs(positional); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateFlagGroups(); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return nil
}

// makeTargets reads the targets a Makefile defines ("name: deps" lines).
func makeTargets(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	rule := regexp.MustCompile(`^([^\s:#=$][^:=]*?)\s*::?(?:[^=]|$)`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		m := rule.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, name := range strings.Fields(m[1]) {
			if !strings.HasPrefix(name, ".") {
				out[name] = true
			}
		}
	}
	return out
}

// checkMakeLine checks that every target a `make ...` line names exists.
func checkMakeLine(line string, targets map[string]bool) error {
	words, err := shellWords(line)
	if err != nil {
		return err
	}
	for _, w := range words[1:] {
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
			continue // an option, or a variable for make
		}
		if !targets[w] {
			return fmt.Errorf("the Makefile has no target %q", w)
		}
	}
	return nil
}

func TestDocsCommandsExist(t *testing.T) {
	targets := makeTargets(t, filepath.Join(docsRoot, "Makefile"))
	require.True(t, targets["demo"] && targets["test"], "the Makefile parser found no demo or test target: is it broken?")
	idemLines, makeLines := 0, 0
	for _, page := range docsCommandPages {
		b, err := os.ReadFile(filepath.Join(docsRoot, page))
		require.NoError(t, err)
		for _, l := range docsShellLines(page, string(b)) {
			var err error
			if strings.HasPrefix(l.text, "idem ") {
				idemLines++
				err = checkIdemLine(l.text)
			} else {
				makeLines++
				err = checkMakeLine(l.text, targets)
			}
			if err != nil {
				t.Errorf("%s: %s\n\t%v", l.where, l.text, err)
			}
		}
	}
	t.Logf("%d idem and %d make lines of %d pages checked", idemLines, makeLines, len(docsCommandPages))
	require.Greater(t, idemLines, 20, "so few idem commands in the docs: is the extractor broken?")
}

// TestDocsReadmeStartsWithDemoAndTest: the README's first block is the two
// commands a newcomer runs.
func TestDocsReadmeStartsWithDemoAndTest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(docsRoot, "README.md"))
	require.NoError(t, err)
	lines := docsShellLines("README.md", string(b))
	require.GreaterOrEqual(t, len(lines), 2)
	require.Equal(t, "make demo", lines[0].text)
	require.Equal(t, "make test", lines[1].text)
	first := strings.Index(string(b), "```")
	require.Equal(t, "```sh\nmake demo", string(b)[first:first+len("```sh\nmake demo")], "the README starts with the make demo block")
}

// TestDocsReadmeConfigIsValid: the README's config example is a config
// idem accepts.
func TestDocsReadmeConfigIsValid(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(docsRoot, "README.md"))
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	require.NotEmpty(t, blocks, "the README has no yaml block")
	for _, m := range blocks {
		if !strings.HasPrefix(m[1], "pipeline:") {
			continue
		}
		cfg, err := config.Parse([]byte(m[1]), func(string) string { return "" })
		require.NoError(t, err)
		require.NoError(t, cfg.Validate())
	}
}

// TestDocsCommandCheckerRefusesMistakes: the checks above fail on what
// they are for.
func TestDocsCommandCheckerRefusesMistakes(t *testing.T) {
	for _, good := range []string{
		"idem audit why DATASET PARTITION --json",
		"idem dlq replay --all --dataset orders --kind fatal --dry-run",
		"idem --config idem.yaml publish orders 2026-11-05 --run-id 'a b' --wait --timeout 30m",
		"idem backfill orders --from 2026-11-01 --to 2026-11-30 --wait | tee out",
		"idem serve --help",
	} {
		require.NoError(t, checkIdemLine(good), good)
	}
	for _, bad := range []string{
		"idem audit whyy orders 2026-11-05",    // unknown subcommand of a group
		"idem frobnicate",                      // unknown command
		"idem audit why orders 2026-11-05 --x", // unknown flag
		"idem dlq ls --datset orders",          // misspelt flag
		"idem audit why orders",                // one argument short
		"idem publish orders 2026-11-05 --wait=maybe",
		"idem audit status orders", // --from and --to are required
	} {
		require.Error(t, checkIdemLine(bad), bad)
	}
	targets := map[string]bool{"demo": true, "chaos": true}
	require.NoError(t, checkMakeLine("make chaos CHAOS_SEED=7", targets))
	require.Error(t, checkMakeLine("make dmeo", targets))

	md := "text\n```sh\nidem dlq ls   # a comment\nCHAOS_NO_FAULTS=1 make chaos \\\n  CHAOS_SEED=7\nnats stream ls\n```\n```yaml\nidem: no\n```\n```console\n$ idem version\nidem 1.0\n```\n"
	lines := docsShellLines("x.md", md)
	var got []string
	for _, l := range lines {
		got = append(got, l.where+" "+l.text)
	}
	require.Equal(t, []string{"x.md:3 idem dlq ls", "x.md:4 make chaos CHAOS_SEED=7", "x.md:12 idem version"}, got)
}

// mdLink is a markdown link's target, or an image's.
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

var codeSpan = regexp.MustCompile("`+[^`]*`+")

// markdownFiles lists the repository's markdown files, generated results
// and tool directories aside.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(docsRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(docsRoot, p)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "node_modules", "vendor", "bench/results":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") && !strings.Contains(rel, "testdata") {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(out)
	return out
}

// links returns the targets of md's links outside code, with their lines.
func links(md string) []docLine {
	var out []docLine
	inFence := false
	for n, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			out = append(out, docLine{where: fmt.Sprint(n + 1), text: m[1]})
		}
	}
	return out
}

// anchors returns the anchors GitHub gives md's headings.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := slugify(text)
		if k := seen[slug]; k > 0 {
			out[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// slugify is GitHub's heading anchor: lower case, punctuation dropped
// (hyphens and underscores kept), spaces turned into hyphens.
func slugify(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func TestDocsLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	require.Contains(t, files, "README.md")
	require.Contains(t, files, "docs/GETTING-STARTED.md")
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(docsRoot, f))
		require.NoError(t, err)
		for _, l := range links(string(b)) {
			checked++
			where := f + ":" + l.where
			target := l.text
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "//") {
				t.Errorf("%s: %s links outside the repository", where, target)
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			base := f
			if b, ok := docsLinkBase[f]; ok {
				base = b
			}
			rel := base
			if path != "" {
				rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(base), path)))
				if strings.HasPrefix(rel, "..") {
					t.Errorf("%s: %s leaves the repository", where, target)
					continue
				}
			}
			st, err := os.Stat(filepath.Join(docsRoot, rel))
			if err != nil {
				t.Errorf("%s: %s: no such file", where, target)
				continue
			}
			if anchor == "" || st.IsDir() || !strings.HasSuffix(rel, ".md") {
				continue
			}
			body, err := os.ReadFile(filepath.Join(docsRoot, rel))
			require.NoError(t, err)
			if !anchors(string(body))[anchor] {
				t.Errorf("%s: %s: %s has no heading with the anchor #%s", where, target, rel, anchor)
			}
		}
	}
	require.Greater(t, checked, 50, "so few links: is the extractor broken?")
}

func TestDocsLinkCheckerRefusesMistakes(t *testing.T) {
	md := "# Top\n\n## At 3 a.m.\n\n### `idem audit why`: one partition's story\n\n## Top\n\nsee [x](a.md#top-1), `[not](a link)`, ![p](p.png)\n```\n[in](code.md)\n```\n"
	a := anchors(md)
	for _, want := range []string{"top", "at-3-am", "idem-audit-why-one-partitions-story", "top-1"} {
		require.True(t, a[want], want)
	}
	var got []string
	for _, l := range links(md) {
		got = append(got, l.text)
	}
	require.Equal(t, []string{"a.md#top-1", "p.png"}, got)
}
