package chaos

import (
	"os"
	"testing"
	"time"
)

// clockStepSeed is TestChaosClockStepShort's seed; CHAOS_SEED overrides it.
const clockStepSeed = 20261206

// TestChaosClockStepShort is a focused campaign of clock steps: one
// replica at a time an hour ahead or behind, for 5 to 20 s, among the
// workload of every dataset and its fatal inputs. Nothing may be lost,
// loaded twice or dead-lettered that should not be.
func TestChaosClockStepShort(t *testing.T) {
	focused(t)
	r := runCampaign(t, Options{Seed: clockStepSeed, Kinds: []string{FaultClockStep}, LongRounds: -1,
		Events: 300, Duration: 45 * time.Second})
	requireFaults(t, r, FaultClockStep)
	if r != nil && r.Faults.ByKind[FaultClockStep] < 2 {
		t.Errorf("%d clock steps injected, want at least 2", r.Faults.ByKind[FaultClockStep])
	}
}

// TestClockStepMovesTheReplicasClock: the fault writes the offset the
// replica's idem reads, and writes it back to zero when it ends.
func TestClockStepMovesTheReplicasClock(t *testing.T) {
	r := newReplica(0, "", "", t.TempDir(), 1, 0)
	n := &nemesis{replicas: []*replica{r}}
	f := &fault{Kind: FaultClockStep, Param: -60, Hold: 300 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- n.clockStep(t.Context(), f) }()
	time.Sleep(100 * time.Millisecond)
	b, err := os.ReadFile(r.clockFile())
	if err != nil || string(b) != "-1h0m0s\n" {
		t.Fatalf("during the step the clock file says %q (%v), want -1h0m0s", b, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(r.clockFile()); string(b) != "0s\n" {
		t.Fatalf("after the step the clock file says %q, want 0s", b)
	}
}
