package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/idem-data/idem/audit"
)

// TracingResult is (h): the small events through `idem serve` with
// tracing on, exporting to a collector that is down (a closed port), and
// with tracing off. Tracing on records every span (sample_ratio 1: receive,
// process, load, a span per statement, settle) and fails every export, the
// worst case it can meet; the ratio is the time it costs.
type TracingResult struct {
	Events int            `json:"events"`
	Reps   int            `json:"reps"`
	Points []TracingPoint `json:"points"`
}

// TracingPoint is one max_in_flight: each way's runs, and the median time
// with tracing on over the median time with it off.
type TracingPoint struct {
	InFlight int        `json:"in_flight"`
	Off      Throughput `json:"off"`
	On       Throughput `json:"on_collector_down"`
	Ratio    float64    `json:"ratio"`
}

func tracingDS() dataset { return smallDataset("trc_small", "trc_small") }

// closedEndpoint is an OTLP/HTTP endpoint nothing listens on: a port just
// taken and given back.
func closedEndpoint() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return "http://" + addr, l.Close()
}

// runTracing is (h): at each max_in_flight, the two ways take turns (the
// order alternating each rep), each through an `idem serve` of its own.
func (e *env) runTracing(ctx context.Context) error {
	p := e.sizes.Partitions
	e.logf("tracing: %d partitions of 10 rows", p)
	if err := e.smallTables(ctx, e.pool, "trc_small", p); err != nil {
		return err
	}
	// The two ways differ by a few percent: more turns than the other
	// sections take, on a box that other work shares.
	reps := max(e.sizes.Reps, e.sizes.ChecksReps, 2)
	out := &TracingResult{Events: min(e.sizes.Events, p-1), Reps: reps}
	e.res.Tracing = out
	for _, c := range e.sizes.InFlight {
		e.sampleLoad(fmt.Sprintf("tracing c=%d", c))
		pt := TracingPoint{InFlight: c}
		for rep := range reps {
			order := []bool{false, true}
			if rep%2 == 1 {
				order = []bool{true, false}
			}
			for _, on := range order {
				el, err := e.tracingRun(ctx, c, rep, on, out.Events)
				if err != nil {
					return fmt.Errorf("tracing (on %v) at max_in_flight %d: %w", on, c, err)
				}
				if on {
					pt.On.add(out.Events, el)
				} else {
					pt.Off.add(out.Events, el)
				}
			}
		}
		if pt.On.PerSec > 0 {
			pt.Ratio = pt.Off.PerSec / pt.On.PerSec
		}
		e.logf("tracing c=%d: off %.0f/s, on (collector down) %.0f/s: %.3f×", c, pt.Off.PerSec, pt.On.PerSec, pt.Ratio)
		out.Points = append(out.Points, pt)
	}
	return nil
}

// tracingRun is one timed run of n events through a new `idem serve`,
// after a warm-up event (the dataset's one-time setup).
func (e *env) tracingRun(ctx context.Context, c, rep int, on bool, n int) (el time.Duration, err error) {
	way := "off"
	e.configExtra = ""
	if on {
		way = "on"
		ep, err := closedEndpoint()
		if err != nil {
			return 0, err
		}
		e.configExtra = "tracing:\n  otlp:\n    endpoint: " + ep + "\n"
	}
	proc, err := e.startIdem(ctx, fmt.Sprintf("tracing-%s-c%d-r%d", way, c, rep), c, []dataset{tracingDS()})
	e.configExtra = ""
	if err != nil {
		return 0, err
	}
	defer proc.kill()
	d := tracingDS()
	s := &small{env: e}
	warm := fmt.Sprintf("trc-warm-%s-c%d-r%d", way, c, rep)
	if _, err := s.idemRun(ctx, proc, []event{{d.Name, dayKey(smallBase, e.sizes.Partitions-1), warm}}, warm, audit.StatusSuccess); err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	if err := e.settle(ctx, "bench.trc_small_t", "idem.pipeline_audit", "idem.run_ledger"); err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf("trc-%s-c%d-r%d", way, c, rep)
	if el, err = s.idemRun(ctx, proc, eventsOf(d.Name, prefix, n), prefix, audit.StatusSuccess); err != nil {
		return 0, err
	}
	if err := proc.stop(); err != nil {
		return 0, err
	}
	// A run that did not trace would measure nothing: its log says it did,
	// and that the exports failed.
	if log, _ := os.ReadFile(proc.logPath); on && (!bytes.Contains(log, []byte("tracing: spans exported over OTLP")) ||
		!bytes.Contains(log, []byte("tracing: export to the collector failed"))) {
		return 0, fmt.Errorf("%s: tracing was not on, or no export failed:\n%s", proc.name, proc.tail())
	}
	return el, nil
}

// tracingMarkdown renders (h).
func (r *Results) tracingMarkdown() string {
	t := r.Tracing
	if t == nil || len(t.Points) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### (h) Tracing: small events with tracing on, the collector down, and off\n\n")
	w("%d events of 10-row partitions (delete_insert) through `idem serve`, publish → last ack, with `tracing.otlp` pointed at a closed port (every span recorded, sample_ratio 1, and every export failing) and without `tracing:`; "+
		"each run a new process after a warm-up event, the two ways taking turns %d times, the order alternating. Medians; the ratio is time with tracing over time without.\n\n", t.Events, t.Reps)
	tb := &table{head: []string{"max_in_flight", "off events/s", "on (collector down) events/s", "time on ÷ off", "runs off", "runs on"}}
	runs := func(xs []float64) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = num(x)
		}
		return strings.Join(s, ", ")
	}
	for _, p := range t.Points {
		tb.add(fmt.Sprint(p.InFlight), num(p.Off.PerSec), num(p.On.PerSec), fmt.Sprintf("%.3f×", p.Ratio), runs(p.Off.Runs), runs(p.On.Runs))
	}
	w("%s\n", tb)
	return b.String()
}
