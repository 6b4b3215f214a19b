package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU is the processor time one method took per event, in microseconds,
// by process: what the box's cores spent, whichever process spent it. It
// is read from /proc before and after the run (user and system time;
// PostgreSQL's backends that exited in between are counted through their
// postmaster's reaped-children time).
type CPU struct {
	// Postgres is every process of the benchmark's cluster.
	Postgres float64 `json:"postgres_us"`
	// Idem is the idem serve process, when the method ran through one.
	Idem float64 `json:"idem_us,omitempty"`
	// Harness is the benchmark's own process: the embedded NATS server,
	// the publisher and the ack watcher.
	Harness float64 `json:"harness_us"`
	// Pooler is the pgbouncer in front of the cluster, while one runs.
	Pooler float64 `json:"pooler_us,omitempty"`
}

// cpuTimes is a snapshot of cumulative CPU seconds.
type cpuTimes struct{ postgres, idem, harness, pooler float64 }

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go builds for.
const clockTicks = 100

// procTicks returns utime+stime and, with children, cutime+cstime of pid.
func procTicks(pid int, children bool) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: the fields
	// that follow start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is the state (field 3); utime is field 14, stime 15, cutime 16,
	// cstime 17.
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	idx := []int{11, 12}
	if children {
		idx = append(idx, 13, 14)
	}
	var t float64
	for _, k := range idx {
		v, err := strconv.ParseFloat(f[k], 64)
		if err != nil {
			return 0, err
		}
		t += v
	}
	return t / clockTicks, nil
}

// parentOf is pid's parent, from /proc/<pid>/status.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no PPid", pid)
}

// clusterCPU is the CPU seconds of the postmaster and every process it
// started, live or reaped.
func clusterCPU(postmaster int) (float64, error) {
	total, err := procTicks(postmaster, true)
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, err := parentOf(pid); err != nil || pp != postmaster {
			continue
		}
		if t, err := procTicks(pid, false); err == nil {
			total += t // a backend that exits meanwhile is simply missed once
		}
	}
	return total, nil
}

// findPostmaster remembers the benchmark cluster's postmaster: the parent
// of one of its backends. It fails (and CPU stays unmeasured) when the
// server is not on this machine.
func (e *env) findPostmaster(ctx context.Context) {
	pid, err := e.int64(ctx, "SELECT pg_backend_pid()")
	if err != nil {
		return
	}
	if pp, err := parentOf(int(pid)); err == nil && pp > 1 {
		e.postmaster = pp
	}
}

// cpuNow samples the CPU times, idemPid's when it is not 0.
func (e *env) cpuNow(idemPid int) (cpuTimes, bool) {
	if e.postmaster == 0 {
		return cpuTimes{}, false
	}
	var t cpuTimes
	var err error
	if t.postgres, err = clusterCPU(e.postmaster); err != nil {
		return cpuTimes{}, false
	}
	if t.harness, err = procTicks(os.Getpid(), false); err != nil {
		return cpuTimes{}, false
	}
	if idemPid != 0 {
		if t.idem, err = procTicks(idemPid, false); err != nil {
			return cpuTimes{}, false
		}
	}
	if e.poolerPid != 0 {
		if t.pooler, err = procTicks(e.poolerPid, false); err != nil {
			return cpuTimes{}, false
		}
	}
	return t, true
}

// withCPU runs fn, n events, and adds the processor time it took per event
// to m: idem serve's too when idemPid is not 0. With reap, the backends
// fn's clients opened are waited for until reaped first (they exit with
// a client such as pgbench), so their time is counted.
func (e *env) withCPU(m *Method, idemPid, n int, reap bool, fn func() error) error {
	var before map[int]bool
	if reap {
		before = e.backends()
	}
	c0, ok0 := e.cpuNow(idemPid)
	if err := fn(); err != nil {
		return err
	}
	if reap {
		e.reaped(before)
	}
	if c1, ok := e.cpuNow(idemPid); ok && ok0 {
		m.addCPU(perEvent(c0, c1, n))
	}
	return nil
}

// perEvent is the CPU between two samples, per event, in microseconds.
func perEvent(a, b cpuTimes, n int) *CPU {
	us := func(x, y float64) float64 { return (y - x) * 1e6 / float64(n) }
	return &CPU{Postgres: us(a.postgres, b.postgres), Idem: us(a.idem, b.idem), Harness: us(a.harness, b.harness), Pooler: us(a.pooler, b.pooler)}
}

// addCPU accumulates one run's CPU per event into m: the mean over runs.
func (m *Method) addCPU(c *CPU) {
	if c == nil {
		return
	}
	if m.CPU == nil {
		m.CPU = &CPU{}
	}
	k := float64(m.cpuRuns)
	m.CPU.Postgres = (m.CPU.Postgres*k + c.Postgres) / (k + 1)
	m.CPU.Idem = (m.CPU.Idem*k + c.Idem) / (k + 1)
	m.CPU.Harness = (m.CPU.Harness*k + c.Harness) / (k + 1)
	m.CPU.Pooler = (m.CPU.Pooler*k + c.Pooler) / (k + 1)
	m.cpuRuns++
}

// backends are the postmaster's live child processes.
func (e *env) backends() map[int]bool {
	out := map[int]bool{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", e.postmaster, e.postmaster))
	if err != nil {
		return out
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out[pid] = true
		}
	}
	return out
}

// reaped waits (up to 3 s, outside any timing) until every backend that
// is not in before has exited and been reaped: a client that just
// disconnected leaves its backend's CPU in neither the backend (gone from
// /proc) nor the postmaster's children's time (not reaped yet) for a while.
func (e *env) reaped(before map[int]bool) {
	if e.postmaster == 0 {
		return
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		extra := false
		for pid := range e.backends() {
			if !before[pid] {
				if pp, err := parentOf(pid); err == nil && pp == e.postmaster && !isAuxiliary(pid) {
					extra = true
					break
				}
			}
		}
		if !extra {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isAuxiliary says whether pid is one of the cluster's own workers
// (autovacuum, parallel workers), which come and go by themselves.
func isAuxiliary(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return true
	}
	c := string(b)
	return strings.Contains(c, "autovacuum") || strings.Contains(c, "parallel worker") || strings.Contains(c, "logical replication")
}
