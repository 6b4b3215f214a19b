package bench

import (
	"context"
	"fmt"
	"time"
)

// Run measures everything the Mode asks for and returns the results. It
// starts and removes its own servers (or database and streams, with
// Options.AdminURL and NATSURL).
func Run(ctx context.Context, opts Options) (*Results, error) {
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
		name string
		run  func(context.Context) error
	}{
		{"small events, duplicates, skipped duplicates", e.runSmall},
		{"big partitions", e.runBig},
		{"backfill", e.runBackfill},
	}
	for _, p := range phases {
		e.logf("== %s", p.name)
		if err := p.run(ctx); err != nil {
			return res, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	e.sampleLoad("end")
	res.Finished = time.Now().UTC()
	return res, nil
}
