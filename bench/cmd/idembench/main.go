// Command idembench runs idem's benchmark harness (package bench) and writes
// its results: a JSON file, a markdown table on stdout, and with -docs the
// report docs/BENCHMARKS.md (the targets, their verdicts and the method)
// and, with -figures (default bench/FIGURES.md), every figure behind it
// with its chart beside it. With -report it only renders a saved JSON file
// again.
//
//	go run ./bench/cmd/idembench -mode full -json bench/results/full.json -docs docs
//	go run ./bench/cmd/idembench -report bench/results/full.json -docs docs
//
// -only runs some phases alone (the others' sections stay empty), and with
// -report, -checks and -statements take the checks figures (g) and the
// statement-mode figures (j) from other results files:
//
//	go run ./bench/cmd/idembench -mode full -only checks -json bench/results/checks-full.json
//	go run ./bench/cmd/idembench -mode full -only statements -json bench/results/statements-full.json
//	go run ./bench/cmd/idembench -report bench/results/full.json -checks bench/results/checks-full.json \
//		-statements bench/results/statements-full.json -docs docs
//
// -cold runs the day-one scenario (a fresh install's first backfill) alone,
// at -mode's sizes, and -coldreport puts its section first in the report:
//
//	go run ./bench/cmd/idembench -mode full -cold bench/results/cold-full.json
//	go run ./bench/cmd/idembench -report bench/results/full.json -coldreport bench/results/cold-full.json -docs docs
//
// -sources adds the section of a sources run (`make bench-sources`, a test
// of package bench: it needs versitygw) to the report:
//
//	go run ./bench/cmd/idembench -report bench/results/full.json -sources bench/results/sources-full.json -docs docs
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/idem-data/idem/bench"
)

func phases(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("idembench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	mode := fs.String("mode", "quick", "full, quick or tiny")
	jsonPath := fs.String("json", "", "write the results here (default bench/results/<mode>.json)")
	docs := fs.String("docs", "", "write BENCHMARKS.md into this directory, and the figures file (-figures) with its chart")
	figures := fs.String("figures", bench.FiguresFile, "with -docs: write every figure here, and its chart "+bench.Chart+" beside it")
	report := fs.String("report", "", "render this results file again instead of running")
	idemBin := fs.String("idem", "", "a built idem binary (default: go build ./cmd/idem)")
	baseline := fs.String("baseline", "", "an earlier idem binary the lone-event phase measures beside this one")
	baselineLabel := fs.String("baseline-label", "", "what the report calls the baseline (default: its path)")
	keep := fs.Bool("keep", false, "keep the work directory (configs, idem logs)")
	only := fs.String("only", "", "run only these phases, comma-separated: "+strings.Join(bench.Phases, ", "))
	checksFrom := fs.String("checks", "", "with -report: take the checks figures (g) from this results file (an -only checks run)")
	statementsFrom := fs.String("statements", "", "with -report: take the statement-mode figures (j) from this results file (an -only statements run)")
	coldPath := fs.String("cold", "", "run only the day-one scenario (a fresh install's first backfill) at -mode's sizes and write its results here")
	coldFrom := fs.String("coldreport", "", "put the day-one targets of this results file (a -cold run) first in BENCHMARKS.md, its figures first in the figures file")
	sourcesFrom := fs.String("sources", "", "put the sources section of this results file (make bench-sources) in BENCHMARKS.md and the figures file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *coldPath != "" {
		if *report != "" || *docs != "" || *coldFrom != "" || *sourcesFrom != "" {
			fmt.Fprintln(errOut, "idembench: -cold writes its results and its table only; render the report with -report FILE -coldreport FILE -docs DIR")
			return 2
		}
		return runCold(bench.Options{
			Mode: bench.Mode(*mode), AdminURL: os.Getenv("IDEM_DATABASE_URL"), IdemBin: *idemBin, Durable: true, KeepWork: *keep,
			Progress: errOut, Command: "idembench " + strings.Join(args, " "),
		}, *coldPath, out, errOut)
	}
	var cold *bench.ColdResults
	if *coldFrom != "" {
		var err error
		if cold, err = bench.LoadCold(*coldFrom); err != nil {
			fmt.Fprintln(errOut, "idembench:", err)
			return 1
		}
	}
	var src *bench.SourcesResults
	if *sourcesFrom != "" {
		var err error
		if src, err = bench.LoadSources(*sourcesFrom); err != nil {
			fmt.Fprintln(errOut, "idembench:", err)
			return 1
		}
	}
	var res *bench.Results
	if *report != "" {
		var err error
		if res, err = bench.Load(*report); err != nil {
			fmt.Fprintln(errOut, "idembench:", err)
			return 1
		}
		for _, from := range []struct {
			path string
			take func(*bench.Results) error
		}{{*checksFrom, res.TakeChecks}, {*statementsFrom, res.TakeStatements}} {
			if from.path == "" {
				continue
			}
			o, err := bench.Load(from.path)
			if err == nil {
				err = from.take(o)
			}
			if err != nil {
				fmt.Fprintln(errOut, "idembench:", from.path+":", err)
				return 1
			}
		}
	} else {
		if *checksFrom != "" || *statementsFrom != "" {
			fmt.Fprintln(errOut, "idembench: -checks and -statements go with -report")
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if *jsonPath == "" {
			*jsonPath = filepath.Join("bench", "results", *mode+".json")
		}
		m := bench.Mode(*mode)
		if _, err := bench.SizesFor(m); err != nil {
			fmt.Fprintln(errOut, "idembench:", err)
			return 2
		}
		var err error
		res, err = bench.Run(ctx, bench.Options{
			Mode: m, AdminURL: os.Getenv("IDEM_DATABASE_URL"), NATSURL: os.Getenv("IDEM_NATS_URL"),
			IdemBin: *idemBin, BaselineBin: *baseline, BaselineLabel: *baselineLabel, Durable: true, KeepWork: *keep, Progress: errOut,
			Command: "idembench " + strings.Join(args, " "), Only: phases(*only),
		})
		if err != nil {
			fmt.Fprintln(errOut, "idembench:", err)
			if res != nil && *jsonPath != "" {
				partial := strings.TrimSuffix(*jsonPath, ".json") + ".partial.json"
				if res.Save(partial) == nil {
					fmt.Fprintln(errOut, "idembench: what was measured is in", partial)
				}
			}
			return 1
		}
		if err := os.MkdirAll(filepath.Dir(*jsonPath), 0o755); err != nil {
			fmt.Fprintln(errOut, "idembench:", err)
			return 1
		}
		if err := res.Save(*jsonPath); err != nil {
			fmt.Fprintln(errOut, "idembench:", err)
			return 1
		}
		fmt.Fprintln(errOut, "idembench: results in", *jsonPath)
	}
	fmt.Fprintln(out, "## Targets\n\n"+res.VerdictTable())
	fmt.Fprint(out, res.Markdown())
	if *docs != "" {
		if err := os.MkdirAll(filepath.Dir(*figures), 0o755); err != nil {
			fmt.Fprintln(errOut, "idembench:", err)
			return 1
		}
		chart := filepath.Join(filepath.Dir(*figures), bench.Chart)
		doc := filepath.Join(*docs, "BENCHMARKS.md")
		for _, f := range []struct{ path, body string }{
			{chart, res.SVG()},
			{*figures, res.Figures(bench.Chart, cold, src)},
			{doc, res.Document(cold, src)},
		} {
			if err := os.WriteFile(f.path, []byte(f.body), 0o644); err != nil {
				fmt.Fprintln(errOut, "idembench:", err)
				return 1
			}
		}
		fmt.Fprintln(errOut, "idembench: wrote", doc, *figures, "and", chart)
	}
	return 0
}

// runCold runs the day-one scenario, writes its results to path and its
// table on out.
func runCold(opts bench.Options, path string, out, errOut io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.RunCold(ctx, opts)
	if err != nil {
		fmt.Fprintln(errOut, "idembench:", err)
		if res != nil {
			partial := strings.TrimSuffix(path, ".json") + ".partial.json"
			if os.MkdirAll(filepath.Dir(partial), 0o755) == nil && res.Save(partial) == nil {
				fmt.Fprintln(errOut, "idembench: what was measured is in", partial)
			}
		}
		return 1
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fmt.Fprintln(errOut, "idembench:", err)
		return 1
	}
	if err := res.Save(path); err != nil {
		fmt.Fprintln(errOut, "idembench:", err)
		return 1
	}
	fmt.Fprintln(errOut, "idembench: results in", path)
	fmt.Fprint(out, res.Markdown())
	return 0
}
