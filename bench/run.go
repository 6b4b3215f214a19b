package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Run measures everything the Mode asks for and returns the results. It
// starts and removes its own servers (or database and streams, with
// Options.AdminURL and NATSURL).
func Run(ctx context.Context, opts Options) (*Results, error) {
	for _, o := range opts.Only {
		if !slices.Contains(Phases, o) {
			return nil, fmt.Errorf("unknown phase %q (want %s)", o, strings.Join(Phases, ", "))
		}
	}
	sizes := opts.Sizes
	if sizes.Events == 0 {
		var err error
		if sizes, err = SizesFor(opts.Mode); err != nil {
			return nil, err
		}
	}
	res := &Results{Mode: opts.Mode, Sizes: sizes, Started: time.Now().UTC(), Command: opts.Command}
	e := &env{opts: opts, sizes: sizes, res: res}
	defer e.close()
	e.sampleLoad("start")
	if err := e.start(ctx); err != nil {
		return res, err
	}
	phases := []struct {
		key, name string
		run       func(context.Context) error
	}{
		{"small", "small events, duplicates, skipped duplicates", e.runSmall},
		{"big", "big partitions", e.runBig},
		{"backfill", "backfill", e.runBackfill},
		{"checks", "checks: loads with and without", e.runChecks},
		{"tracing", "tracing: on with the collector down, and off", e.runTracing},
		{"lone", "a lone event's latency", e.runLone},
		{"statements", "statement modes: prepare, describe, exec, and through PgBouncer", e.runStatements},
		{"lanes", "live events during a backfill", e.runLanes},
	}
	for _, p := range phases {
		if len(opts.Only) > 0 && !slices.Contains(opts.Only, p.key) {
			continue
		}
		e.logf("== %s", p.name)
		if err := p.run(ctx); err != nil {
			return res, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	e.sampleLoad("end")
	res.Finished = time.Now().UTC()
	return res, nil
}
