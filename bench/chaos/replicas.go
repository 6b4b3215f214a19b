package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// restartDelay is how long the supervisor waits before restarting a dead
// replica, as systemd's RestartSec or a Kubernetes back-off would.
const restartDelay = 300 * time.Millisecond

// exit is how one incarnation of a replica ended.
type exit struct {
	Replica     int       `json:"replica"`
	Incarnation int       `json:"incarnation"`
	At          time.Time `json:"at"`
	Code        int       `json:"code"`                // -1 when killed by a signal
	Signal      string    `json:"signal"`              // "" unless killed by a signal
	Killed      bool      `json:"killed"`              // by the nemesis
	Restarted   bool      `json:"restarted,omitempty"` // SIGTERM of a rolling restart
	Crashed     bool      `json:"crashed"`
	CrashRun    string    `json:"crash_run,omitempty"` // the run_id the crash hook named
	Final       bool      `json:"final"`               // the stop at the end of the campaign
	Log         string    `json:"log"`
	LastLine    string    `json:"last_line,omitempty"`
}

// replica is one supervised `idem serve`: whenever it dies, it is started
// again, with a new log file, until the campaign stops it.
type replica struct {
	id   int
	bin  string
	cfg  string
	dir  string
	seed int64
	prob float64
	env  []string // added to every process's environment

	mu          sync.Mutex
	cmd         *exec.Cmd
	incarnation int
	killAsked   bool
	restartAsk  bool
	paused      bool
	held        bool // no new process until released (site_crash)
	stopping    bool
	exits       []exit
	curLog      string
	done        chan struct{}
}

func newReplica(id int, bin, cfg, dir string, seed int64, crashProb float64) *replica {
	return &replica{id: id, bin: bin, cfg: cfg, dir: dir, seed: seed, prob: crashProb, done: make(chan struct{})}
}

// supervise runs the replica until stop is called.
func (r *replica) supervise() {
	defer close(r.done)
	for {
		r.waitReleased()
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			return
		}
		r.incarnation++
		inc := r.incarnation
		logPath := filepath.Join(r.dir, fmt.Sprintf("replica%d-%03d.log", r.id, inc))
		cmd, err := r.start(inc, logPath)
		if err != nil {
			r.mu.Unlock()
			r.record(exit{Replica: r.id, Incarnation: inc, At: time.Now(), Code: -2, LastLine: err.Error(), Log: logPath})
			time.Sleep(restartDelay)
			continue
		}
		r.cmd, r.killAsked, r.restartAsk, r.paused, r.curLog = cmd, false, false, false, logPath
		r.mu.Unlock()

		werr := cmd.Wait()
		r.mu.Lock()
		e := exit{Replica: r.id, Incarnation: inc, At: time.Now(), Code: cmd.ProcessState.ExitCode(),
			Killed: r.killAsked, Restarted: r.restartAsk, Final: r.stopping, Log: logPath}
		r.cmd = nil
		r.mu.Unlock()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal().String()
		}
		var ee *exec.ExitError
		if werr != nil && !errors.As(werr, &ee) {
			e.LastLine = werr.Error()
		}
		scan := scanLog(logPath)
		if e.LastLine == "" {
			e.LastLine = scan.last
		}
		e.Crashed = e.Code == 3 && scan.crashRun != ""
		if e.Crashed {
			e.CrashRun = scan.crashRun
		}
		r.record(e)
		if e.Final {
			return
		}
		time.Sleep(restartDelay)
	}
}

func (r *replica) start(inc int, logPath string) (*exec.Cmd, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.bin, "serve", "--config", r.cfg, "--grace", "10s")
	cmd.Env = append(os.Environ(), "IDEM_LOG_LEVEL=info", "IDEM_TEST_CLOCK_FILE="+r.clockFile())
	cmd.Env = append(cmd.Env, r.env...)
	if r.prob > 0 {
		cmd.Env = append(cmd.Env,
			fmt.Sprintf("IDEM_TEST_CRASH_AFTER_COMMIT_PROB=%g", r.prob),
			fmt.Sprintf("IDEM_TEST_CRASH_SEED=%d", r.seed*1000+int64(r.id)*100+int64(inc)))
	}
	cmd.Stdout, cmd.Stderr = f, f
	// A child must not outlive the harness, even when the test binary is
	// killed by its timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	f.Close() // the child holds its own descriptor
	if err != nil {
		return nil, err
	}
	return cmd, nil
}

func (r *replica) record(e exit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exits = append(r.exits, e)
}

// kill sends SIGKILL to the current process; false if none runs.
func (r *replica) kill() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false
	}
	r.killAsked = true
	return r.cmd.Process.Signal(syscall.SIGKILL) == nil
}

// pause sends SIGSTOP and returns the function that sends SIGCONT to that
// same process (a no-op if it died meanwhile).
func (r *replica) pause() (resume func(), ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.paused {
		return nil, false
	}
	cmd := r.cmd
	if cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return nil, false
	}
	r.paused = true
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGCONT)
		if r.cmd == cmd {
			r.paused = false
		}
	}, true
}

// stop ends supervision: SIGCONT then SIGTERM, so the process finishes its
// loads and exits 0; SIGKILL after within.
func (r *replica) stop(within time.Duration) {
	r.mu.Lock()
	r.stopping = true
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-time.After(within):
		r.mu.Lock()
		if r.cmd != nil {
			_ = r.cmd.Process.Signal(syscall.SIGKILL)
		}
		r.mu.Unlock()
		<-r.done
	}
}

// logPath is the log of the current (or last) incarnation.
func (r *replica) logPath() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.curLog
}

// disableCrash turns the crash hook off: the running process is restarted
// gracefully, as a deploy would, and its successors start without the hook.
func (r *replica) disableCrash() {
	r.mu.Lock()
	on := r.prob != 0
	r.mu.Unlock()
	if on {
		_ = r.restart(time.Minute, true)
	}
}

// restart is one step of a rolling restart: once the replica runs a process
// that has said it started, SIGCONT and SIGTERM to it, so it finishes or
// hands back its loads and exits 0; the supervisor starts its successor.
// restart returns when the successor has said it started, or an error when
// that took longer than within. crashOff turns the crash hook off for the
// successors.
func (r *replica) restart(within time.Duration, crashOff bool) error {
	deadline := time.Now().Add(within)
	inc := 0
	for inc == 0 {
		r.mu.Lock()
		cur, running, path, stopping := r.incarnation, r.cmd != nil, r.curLog, r.stopping
		r.mu.Unlock()
		if stopping {
			return nil
		}
		if running && logSays(path, serveStarted) {
			r.mu.Lock()
			if r.incarnation == cur && r.cmd != nil && !r.stopping {
				inc = cur
				if crashOff {
					r.prob = 0
				}
				r.restartAsk = true
				_ = r.cmd.Process.Signal(syscall.SIGCONT)
				_ = r.cmd.Process.Signal(syscall.SIGTERM)
			}
			r.mu.Unlock()
		}
		if inc == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("chaos: replica %d: no started process to restart within %s", r.id, within)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for {
		r.mu.Lock()
		newer, path := r.incarnation > inc && r.cmd != nil, r.curLog
		r.mu.Unlock()
		if newer && logSays(path, serveStarted) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: replica %d: incarnation %d not replaced by a started process within %s", r.id, inc, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serveStarted is the line `idem serve` logs once it consumes.
const serveStarted = "idem serve started"

// logSays reports whether the first 256 KiB of the log at path contain s:
// startup lines come first, and a long log is not read again and again.
func logSays(path, s string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 256<<10))
	return strings.Contains(string(b), s)
}

func (r *replica) history() []exit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exit(nil), r.exits...)
}

// logScan is what the checker reads in one process's log.
type logScan struct {
	last     string   // the last non-empty line, cut to 300 bytes
	crashRun string   // the run_id of the crash hook's line, if it fired
	panics   []string // lines of panics, runtime fatal errors and data races
	reverify ReverifyFigures
}

// reverifyLine is the line idem logs after each re-verification pass.
const reverifyLine = "warehouse re-verified"

// addPass adds the figures of one pass's log line.
func (f *ReverifyFigures) addPass(line string) {
	var p struct {
		Level string
		ReverifyFigures
	}
	if json.Unmarshal([]byte(line), &p) != nil {
		return
	}
	p.Passes = 1
	if p.Level != "info" {
		p.Unfinished = 1
	}
	f.add(p.ReverifyFigures)
}

// panicMarks are the lines a Go process writes when it panics, dies of a
// runtime error or (built with -race) sees a data race, and the line idem
// writes when it recovers a handler's panic.
var panicMarks = []string{"panic:", "fatal error:", "WARNING: DATA RACE", `"handler panicked"`}

func scanLog(path string) logScan {
	var s logScan
	f, err := os.Open(path)
	if err != nil {
		return s
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		s.last = l
		// "idemtest: random crash at after_commit of run <run_id> at <time>"
		if rest, ok := strings.CutPrefix(l, "idemtest: random crash at after_commit of run "); ok {
			if i := strings.LastIndex(rest, " at "); i > 0 {
				s.crashRun = rest[:i]
			}
		}
		if strings.Contains(l, reverifyLine) {
			s.reverify.addPass(l)
		}
		for _, m := range panicMarks {
			if strings.HasPrefix(l, m) || (m[0] == '"' && strings.Contains(l, m)) {
				s.panics = append(s.panics, cut(l, 300))
				break
			}
		}
	}
	s.last = cut(s.last, 300)
	return s
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (f *ReverifyFigures) add(g ReverifyFigures) {
	f.Passes += g.Passes
	f.Unfinished += g.Unfinished
	f.Checked += g.Checked
	f.Missing += g.Missing
	f.Reloaded += g.Reloaded
	f.Ahead += g.Ahead
	f.Skipped += g.Skipped
	f.Failed += g.Failed
}
