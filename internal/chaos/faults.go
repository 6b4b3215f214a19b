package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/internal/localpg"
)

// Fault kinds, as the report names them.
const (
	FaultKill        = "kill"
	FaultCrashCommit = "crash_commit" // from the crash hook, not the schedule
	FaultPause       = "pause"
	FaultPGFast      = "pg_fast"
	FaultPGImmediate = "pg_immediate"
	FaultPGTerminate = "pg_terminate"
	FaultNATSRestart = "nats_restart"
	FaultLatency     = "latency"
	FaultResetPeer   = "reset_peer"
	FaultTimeout     = "timeout"
)

// faultWeights is how often each scheduled kind is drawn.
var faultWeights = []struct {
	kind   string
	weight int
}{
	{FaultKill, 22},
	{FaultPause, 12},
	{FaultPGFast, 7},
	{FaultPGImmediate, 7},
	{FaultPGTerminate, 8},
	{FaultNATSRestart, 10},
	{FaultLatency, 10},
	{FaultResetPeer, 12},
	{FaultTimeout, 12},
}

// fault is one entry of the schedule and, once run, of the history.
type fault struct {
	Kind    string        `json:"kind"`
	At      time.Duration `json:"-"` // planned offset in the fault phase
	Replica int           `json:"replica,omitempty"`
	Hold    time.Duration `json:"-"` // how long the fault lasts
	Param   int           `json:"param,omitempty"`
	Start   time.Time     `json:"start"`
	End     time.Time     `json:"end"`
	Skipped string        `json:"skipped,omitempty"` // why it did not happen
	Err     string        `json:"error,omitempty"`
}

// schedule draws the faults of a phase of length d from rng.
func schedule(o Options, rng *rand.Rand) []*fault {
	total := 0
	for _, w := range faultWeights {
		total += w.weight
	}
	var out []*fault
	at := o.FaultGapMin
	for at < o.Duration {
		pick := rng.IntN(total)
		kind := faultWeights[0].kind
		for _, w := range faultWeights {
			if pick < w.weight {
				kind = w.kind
				break
			}
			pick -= w.weight
		}
		f := &fault{Kind: kind, At: at, Replica: rng.IntN(o.Replicas)}
		ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
		switch kind {
		case FaultPause:
			f.Hold = o.AckWait + ms(500, 3000)
		case FaultPGFast, FaultPGImmediate:
			f.Hold = ms(0, 3000)
		case FaultNATSRestart:
			f.Hold = ms(0, 2000)
		case FaultLatency:
			f.Hold, f.Param = ms(2000, 8000), 50+rng.IntN(350)
		case FaultResetPeer:
			f.Hold, f.Param = ms(500, 3000), rng.IntN(300)
		case FaultTimeout:
			f.Hold, f.Param = ms(1000, 5000), 200+rng.IntN(2800)
		}
		out = append(out, f)
		gap := o.FaultGapMin + time.Duration(rng.Int64N(int64(o.FaultGapMax-o.FaultGapMin)+1))
		at += f.Hold + gap
	}
	return out
}

// nemesis runs the schedule, one fault at a time, against the processes,
// the database and the NATS server of the campaign.
type nemesis struct {
	replicas []*replica
	pg       *localpg.Server
	db       *pgxpool.Pool // direct, for pg_terminate_backend
	dbName   string
	nats     *natsBox
	link     *dbLink
	logf     func(string, ...any)

	mu      sync.Mutex
	history []*fault
}

// run executes the faults in order until the schedule or ctx ends. Every
// fault heals before run moves on, even when ctx is cancelled mid-fault.
func (n *nemesis) run(ctx context.Context, start time.Time, faults []*fault) error {
	for _, f := range faults {
		if d := time.Until(start.Add(f.At)); d > 0 {
			sleepCtx(ctx, d)
		}
		if ctx.Err() != nil {
			return nil
		}
		f.Start = time.Now()
		err := n.inject(ctx, f)
		f.End = time.Now()
		n.mu.Lock()
		n.history = append(n.history, f)
		n.mu.Unlock()
		if err != nil {
			f.Err = err.Error()
			// A fault the harness cannot heal (PostgreSQL that will not start)
			// ends the campaign: what follows would measure the harness.
			if f.Kind == FaultPGFast || f.Kind == FaultPGImmediate || f.Kind == FaultNATSRestart {
				return fmt.Errorf("chaos: %s: %w", f.Kind, err)
			}
		}
		n.logf("fault %-12s replica=%d hold=%s param=%d %s%s", f.Kind, f.Replica, f.Hold, f.Param, f.Skipped, f.Err)
	}
	return nil
}

func (n *nemesis) inject(ctx context.Context, f *fault) error {
	// Healing must happen whatever ctx says.
	heal := context.WithoutCancel(ctx)
	switch f.Kind {
	case FaultKill:
		if !n.replicas[f.Replica].kill() {
			f.Skipped = "replica not running"
		}
	case FaultPause:
		resume, ok := n.replicas[f.Replica].pause()
		if !ok {
			f.Skipped = "replica not running"
			return nil
		}
		sleepCtx(ctx, f.Hold)
		resume()
	case FaultPGFast, FaultPGImmediate:
		mode := "fast"
		if f.Kind == FaultPGImmediate {
			mode = "immediate"
		}
		sctx, cancel := context.WithTimeout(heal, 2*time.Minute)
		defer cancel()
		if err := n.pg.Stop(sctx, mode); err != nil {
			return err
		}
		sleepCtx(ctx, f.Hold)
		return n.pg.Restart(sctx, "")
	case FaultPGTerminate:
		tctx, cancel := context.WithTimeout(heal, 10*time.Second)
		defer cancel()
		var k int
		err := n.db.QueryRow(tctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = 'idem'`, n.dbName).Scan(&k)
		f.Param = k
		return err
	case FaultNATSRestart:
		n.nats.down()
		sleepCtx(ctx, f.Hold)
		return n.nats.up()
	case FaultLatency:
		attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, f.Param, f.Param/2)
		return n.withToxic(ctx, f, "latency", attrs, "upstream", "downstream")
	case FaultResetPeer:
		return n.withToxic(ctx, f, "reset_peer", fmt.Sprintf(`{"timeout":%d}`, f.Param), "upstream")
	case FaultTimeout:
		return n.withToxic(ctx, f, "timeout", fmt.Sprintf(`{"timeout":%d}`, f.Param), "upstream")
	}
	return nil
}

func (n *nemesis) withToxic(ctx context.Context, f *fault, kind, attrs string, streams ...string) error {
	remove, err := n.link.toxic(kind, attrs, streams...)
	if err != nil {
		return err
	}
	sleepCtx(ctx, f.Hold)
	remove()
	return nil
}

func (n *nemesis) faults() []*fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*fault(nil), n.history...)
}
