package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../../.."

// TestDocsGenerated: docs/BENCHMARKS.md, bench/FIGURES.md and its chart are
// what the generator makes of the saved runs in bench/results/, as `make
// bench-docs` renders them. Nothing runs: it only renders again.
func TestDocsGenerated(t *testing.T) {
	dir := t.TempDir()
	results := func(name string) string { return filepath.Join(root, "bench", "results", name) }
	var out, errOut bytes.Buffer
	code := run([]string{
		"-report", results("full.json"),
		"-statements", results("statements-full.json"),
		"-coldreport", results("cold-full.json"),
		"-sources", results("sources-full.json"),
		"-docs", dir,
		"-figures", filepath.Join(dir, "FIGURES.md"),
	}, &out, &errOut)
	if code != 0 {
		t.Fatalf("idembench exited %d: %s", code, errOut.String())
	}
	for made, committed := range map[string]string{
		"BENCHMARKS.md":    "docs/BENCHMARKS.md",
		"FIGURES.md":       "bench/FIGURES.md",
		"bench-events.svg": "bench/bench-events.svg",
	} {
		want, err := os.ReadFile(filepath.Join(root, committed))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, made))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the generator makes of bench/results/: run make bench-docs\n(first difference: %s)",
				committed, firstDifference(string(want), string(got)))
		}
	}
}

// firstDifference names the first line where a and b differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ": " + truncate(x) + " / generated: " + truncate(y)
		}
	}
	return "none"
}

func truncate(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
