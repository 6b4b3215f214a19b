package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// FaultClockStep moves one replica's wall clock an hour forward or back
// (Param: +60 or -60 minutes) for the fault's hold, then back: NTP
// stepping the clock of a VM restored from a snapshot. idem built with
// -tags idemtest reads its host clock through a file the harness writes
// (IDEM_TEST_CLOCK_FILE); time.Now's monotonic reading is not moved, as a
// real step does not move it. Nothing may misfire: no valid event
// dead-lettered, lost or loaded twice, no pause or wait ended early.
const FaultClockStep = "clock_step"

// clockFile is the file replica r's host clock offset is read from.
func (r *replica) clockFile() string { return filepath.Join(r.dir, fmt.Sprintf("clock-%d", r.id)) }

// setClock writes offset as replica r's host clock step.
func (r *replica) setClock(offset time.Duration) error {
	return os.WriteFile(r.clockFile(), []byte(offset.String()+"\n"), 0o644)
}

// clockStep steps f.Replica's clock by f.Param minutes for f.Hold.
func (n *nemesis) clockStep(ctx context.Context, f *fault) error {
	r := n.replicas[f.Replica]
	if err := r.setClock(time.Duration(f.Param) * time.Minute); err != nil {
		return err
	}
	sleepCtx(ctx, f.Hold)
	return r.setClock(0)
}
