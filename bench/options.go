package bench

import (
	"fmt"
	"io"
	"strings"
)

// Mode picks the sizes of a run.
type Mode string

// Modes, from the full report to the smoke test's few events.
const (
	// ModeFull is `make bench`: the sizes the benchmark targets are set at (20-40 minutes).
	ModeFull Mode = "full"
	// ModeQuick is `make bench-quick`: about a minute, 100k-row partitions only.
	ModeQuick Mode = "quick"
	// ModeTiny is the smoke test: a few events, one load of each kind.
	ModeTiny Mode = "tiny"
)

// Sizes are the knobs of a run; SizesFor gives each Mode's.
type Sizes struct {
	// Events is the number of small events per measured run.
	Events int `json:"events"`
	// Partitions is the number of 10-row partitions in the small staging table
	// (and in the target, which is pre-filled: every small load is a rerun).
	Partitions int `json:"partitions"`
	// InFlight are the max_in_flight values (and pgx/pgbench concurrencies).
	InFlight []int `json:"in_flight"`
	// Reps repeats each small throughput run; the median is reported.
	Reps int `json:"reps"`
	// PacedEvents is the number of events of each paced latency run.
	PacedEvents int `json:"paced_events"`
	// Big are the rows per partition of the big-partition loads.
	Big []int `json:"big"`
	// Reruns of the same big partition, to show drift.
	Reruns int `json:"reruns"`
	// BackfillDays partitions of BackfillRows rows, loaded at BackfillInFlight.
	BackfillDays     int   `json:"backfill_days"`
	BackfillRows     int   `json:"backfill_rows"`
	BackfillInFlight []int `json:"backfill_in_flight"`
	// ChecksRows are the rows of the partition the checks' big loads load
	// (with and without checks, interleaved ChecksReps times each); the
	// checks' small events are Events 10-row partitions at each InFlight,
	// ChecksReps times with and without.
	ChecksRows int `json:"checks_rows,omitempty"`
	ChecksReps int `json:"checks_reps,omitempty"`
	// StatementsInFlight are the max_in_flight of (j)'s small events (Events
	// of them per run), StatementsBig the rows of its big loads (run at the
	// first max_in_flight); every statement mode takes StatementsReps turns.
	StatementsInFlight []int `json:"statements_in_flight,omitempty"`
	StatementsBig      []int `json:"statements_big,omitempty"`
	StatementsReps     int   `json:"statements_reps,omitempty"`
	// LanesBackfill is the backfill (k) runs live events during; 0 (the
	// smoke test) skips (k).
	LanesBackfill int `json:"lanes_backfill,omitempty"`
}

// SizesFor returns the sizes of mode m.
func SizesFor(m Mode) (Sizes, error) {
	switch m {
	case ModeFull:
		return Sizes{Events: 2000, Partitions: 20000, InFlight: []int{1, 4, 8}, Reps: 3, PacedEvents: 1000,
			Big: []int{100_000, 1_000_000}, Reruns: 5, BackfillDays: 365, BackfillRows: 10_000, BackfillInFlight: []int{1, 2, 4},
			ChecksRows: 1_000_000, ChecksReps: 5,
			StatementsInFlight: []int{4, 1}, StatementsBig: []int{100_000, 1_000_000}, StatementsReps: 7,
			LanesBackfill: 5000}, nil
	case ModeQuick:
		return Sizes{Events: 300, Partitions: 2000, InFlight: []int{1, 4, 8}, Reps: 1, PacedEvents: 100,
			Big: []int{100_000}, Reruns: 5, BackfillDays: 30, BackfillRows: 10_000, BackfillInFlight: []int{1, 4},
			ChecksRows: 100_000, ChecksReps: 3,
			StatementsInFlight: []int{4, 1}, StatementsBig: []int{100_000}, StatementsReps: 2,
			LanesBackfill: 5000}, nil
	case ModeTiny:
		return Sizes{Events: 12, Partitions: 40, InFlight: []int{2}, Reps: 1, PacedEvents: 6,
			Big: []int{2000}, Reruns: 2, BackfillDays: 4, BackfillRows: 100, BackfillInFlight: []int{2},
			ChecksRows: 2000, ChecksReps: 1,
			StatementsInFlight: []int{2}, StatementsBig: []int{2000}, StatementsReps: 1}, nil
	}
	return Sizes{}, fmt.Errorf("unknown mode %q (want full, quick or tiny)", m)
}

// Options configure Run. Only Mode is required.
type Options struct {
	Mode Mode
	// Sizes overrides the Mode's sizes when Events is set.
	Sizes Sizes
	// AdminURL is a PostgreSQL URL whose role may CREATE DATABASE (env
	// IDEM_DATABASE_URL in the command); empty starts a durable throwaway
	// cluster.
	AdminURL string
	// NATSURL is a NATS server with JetStream (env IDEM_NATS_URL); empty
	// starts one in this process.
	NATSURL string
	// IdemBin is a built idem binary; empty builds ./cmd/idem.
	IdemBin string
	// BaselineBin is an earlier idem binary the lone-event phase (i)
	// measures beside this one; empty measures this one only.
	BaselineBin string
	// BaselineLabel is what the report calls it (default: its path).
	BaselineLabel string
	// Durable keeps fsync on in the throwaway cluster; the full and quick
	// modes always do, the smoke test does not need to.
	Durable bool
	// KeepWork keeps the work directory (configs, idem logs) for inspection.
	KeepWork bool
	// Progress receives one line per step; nil is silent.
	Progress io.Writer
	// Command is how the run was started, for the report.
	Command string
	// Only, when set, runs only these phases (Phases names them), e.g.
	// []string{"checks"}: the other sections of the results stay empty.
	Only []string
}

// Phases are the names Options.Only takes, in the order a run takes them.
var Phases = []string{"small", "big", "backfill", "checks", "tracing", "lone", "statements", "lanes"}

func labelRows(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dm", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
