package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/schemas"
)

// dataset is one entry of the idem config the harness writes.
type dataset struct {
	Name, Strategy, Target, PartitionColumn, View, Source string
	Key                                                   []string
	// Checks are the items of its checks: list, each a line "      - ...".
	Checks string
}

func (d dataset) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n    strategy: %s\n    target: %s\n", d.Name, d.Strategy, d.Target)
	if d.PartitionColumn != "" {
		fmt.Fprintf(&b, "    partition_column: %s\n", d.PartitionColumn)
	}
	if len(d.Key) > 0 {
		fmt.Fprintf(&b, "    key: [%s]\n", strings.Join(d.Key, ", "))
	}
	if d.View != "" {
		fmt.Fprintf(&b, "    view: %s\n", d.View)
	}
	fmt.Fprintf(&b, "    source: %s\n", d.Source)
	if d.Checks != "" {
		b.WriteString("    checks:\n" + d.Checks)
	}
	return b.String()
}

// idemProc is one `idem serve` child.
type idemProc struct {
	name    string
	cfg     string
	logPath string
	cmd     *exec.Cmd
	done    chan error
	acks    *ackWatcher
}

// ackWatcher sees idem's acks go by. An ack is a core NATS message to the
// message's reply subject, $JS.ACK.<stream>.<consumer>.<delivered>.<stream
// seq>...; idem sends it (DoubleAck) only after its load committed, so the
// moment it passes is "committed and acknowledged", on our clock, for every
// event: no database timestamp, no polling.
type ackWatcher struct {
	sub *nats.Subscription
	mu  sync.Mutex
	at  map[uint64]time.Time
}

func (e *env) watchAcks() (*ackWatcher, error) {
	w := &ackWatcher{at: map[uint64]time.Time{}}
	var err error
	w.sub, err = e.nc.Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		now := time.Now()
		if !bytes.Equal(m.Data, []byte("+ACK")) {
			return // progress (+WPI), nak, term
		}
		tok := strings.Split(m.Subject, ".")
		for i, t := range tok {
			if t != streamName || i+3 >= len(tok) {
				continue
			}
			seq, err := strconv.ParseUint(tok[i+3], 10, 64)
			if err != nil {
				return
			}
			w.mu.Lock()
			if _, seen := w.at[seq]; !seen {
				w.at[seq] = now
			}
			w.mu.Unlock()
			return
		}
	})
	if err != nil {
		return nil, err
	}
	return w, e.nc.Flush()
}

// wait returns when every seq was acked, with the time of each ack. The
// times are taken by the subscription as each ack passes, so how often wait
// looks does not change them: it looks every few milliseconds, at the seqs
// still missing only. (Scanning every seq at every ack cost the harness
// O(events²) map reads under the lock the subscription needs, on the cores
// idem and the server share: CPU taken from the run it measured.)
func (w *ackWatcher) wait(ctx context.Context, seqs []uint64, within time.Duration) ([]time.Time, error) {
	deadline := time.After(within)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	out := make([]time.Time, len(seqs))
	pending := make([]int, len(seqs))
	for i := range pending {
		pending[i] = i
	}
	for {
		w.mu.Lock()
		left := pending[:0]
		for _, i := range pending {
			if t, ok := w.at[seqs[i]]; ok {
				out[i] = t
			} else {
				left = append(left, i)
			}
		}
		w.mu.Unlock()
		pending = left
		if len(pending) == 0 {
			return out, nil
		}
		select {
		case <-tick.C:
		case <-deadline:
			return nil, fmt.Errorf("%d of %d events not acknowledged after %s", len(pending), len(seqs), within)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// count is how many of seqs were acked.
func (w *ackWatcher) count(seqs []uint64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range seqs {
		if _, ok := w.at[s]; ok {
			n++
		}
	}
	return n
}

func (w *ackWatcher) stop() { _ = w.sub.Unsubscribe() }

func lastOf(ts []time.Time) time.Time {
	var last time.Time
	for _, t := range ts {
		if t.After(last) {
			last = t
		}
	}
	return last
}

func seqRange(from, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(from + i)
	}
	return out
}

// writeConfig writes the idem config of a phase and returns its path.
func (e *env) writeConfig(name string, inFlight int, dss []dataset) (string, error) {
	var mode string
	if e.serve.statementMode != "" {
		mode = "  statement_mode: " + e.serve.statementMode + "\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `pipeline: %s
nats:
  url: %s
  stream: %s
  dlq_stream: %s
  consumer: %s
  subject_prefix: %s
  dlq_subject_prefix: %s
  ack_wait: 60s
  max_in_flight: %d
postgres:
  url: %s
%shttp:
  addr: %s
%sdatasets:
`, pipeline, e.natsURL, streamName, dlqName, consumerName, subjectPre, dlqPre, inFlight, cmp.Or(e.serve.url, e.dbURL), mode,
		cmp.Or(e.profileAddr, "127.0.0.1:0"), e.profileHTTP())
	for _, d := range dss {
		b.WriteString(d.yaml())
	}
	b.WriteString(e.configExtra)
	path := filepath.Join(e.work, name+".yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// childEnv is our environment without IDEM_* variables: the config the
// harness writes must be the whole truth (IDEM_DATABASE_URL would override
// its database).
func childEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			out = append(out, kv)
		}
	}
	return out
}

// deleteStreams removes the harness's streams, so each idem serve starts
// from an empty stream and a new consumer.
func (e *env) deleteStreams(ctx context.Context) {
	for _, s := range []string{streamName, dlqName, streamName + "_ADVISORIES"} {
		if err := e.js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			e.logf("delete stream %s: %v", s, err)
		}
	}
}

// startIdem writes a config and starts `idem serve` on it, returning once it
// reports it is consuming.
func (e *env) startIdem(ctx context.Context, name string, inFlight int, dss []dataset) (*idemProc, error) {
	e.deleteStreams(ctx)
	cfg, err := e.writeConfig(name, inFlight, dss)
	if err != nil {
		return nil, err
	}
	p, err := spawnServe(e.idemBin, e.work, name, cfg, e.serveEnv...)
	if err != nil {
		return nil, err
	}
	e.children = append(e.children, p)
	if p.acks, err = e.watchAcks(); err != nil {
		p.kill()
		return nil, err
	}
	err = waitFor(ctx, 60*time.Second, 20*time.Millisecond, "idem serve to start", func() (bool, error) {
		select {
		case err := <-p.done:
			p.done <- err
			return false, fmt.Errorf("idem serve exited at start (%v):\n%s", err, p.tail())
		default:
		}
		b, _ := os.ReadFile(p.logPath)
		return bytes.Contains(b, []byte("idem serve started")), nil
	})
	if err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// spawnServe starts `idem serve` (bin) on cfg, its output in work/name.log,
// without waiting for it to be up; env adds to childEnv.
func spawnServe(bin, work, name, cfg string, env ...string) (*idemProc, error) {
	p := &idemProc{name: name, cfg: cfg, logPath: filepath.Join(work, name+".log"), done: make(chan error, 1)}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, "serve", "--config", cfg, "--grace", "60s")
	p.cmd.Env = append(childEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { err := p.cmd.Wait(); logf.Close(); p.done <- err }()
	return p, nil
}

func (p *idemProc) tail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// peakMiB is the child's peak resident set (VmHWM) so far.
func (p *idemProc) peakMiB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

// stop sends SIGTERM and waits for a clean exit.
func (p *idemProc) stop() error {
	if p.acks != nil {
		p.acks.stop()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			return fmt.Errorf("idem serve %s: %v\n%s", p.name, err, p.tail())
		}
		return nil
	case <-time.After(90 * time.Second):
		p.kill()
		return fmt.Errorf("idem serve %s did not stop within 90s", p.name)
	}
}

func (p *idemProc) kill() {
	select {
	case err := <-p.done:
		p.done <- err
	default:
		_ = p.cmd.Process.Kill()
		p.done <- <-p.done
	}
}

// route is the SQL path idem's log names for a run's load.
func (p *idemProc) route(run string) string {
	b, _ := os.ReadFile(p.logPath)
	key := []byte(`"run_id":"` + run + `"`)
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.Contains(line, key) {
			continue
		}
		if i := bytes.Index(line, []byte(`"route":"`)); i >= 0 {
			rest := line[i+len(`"route":"`):]
			if j := bytes.IndexByte(rest, '"'); j >= 0 {
				return string(rest[:j])
			}
		}
	}
	return ""
}

// event is one partition-ready event the harness publishes.
type event struct{ dataset, partition, run string }

func (e *env) msg(ev event) (*nats.Msg, error) {
	body, err := schemas.PartitionReady{Dataset: ev.dataset, Partition: ev.partition, RunID: ev.run}.Marshal()
	if err != nil {
		return nil, err
	}
	// No Nats-Msg-Id: duplicates must reach the consumer.
	return &nats.Msg{Subject: subjectPre + "." + ev.dataset, Data: body}, nil
}

// publishBurst publishes every event at once (async, confirmed) and returns
// when the first left and the stream sequence of each.
func (e *env) publishBurst(ctx context.Context, subjectPrefix string, evs []event) (time.Time, []uint64, error) {
	msgs := make([]*nats.Msg, len(evs))
	for i, ev := range evs {
		m, err := e.msg(ev)
		if err != nil {
			return time.Time{}, nil, err
		}
		if subjectPrefix != "" {
			m.Subject = subjectPrefix + "." + ev.dataset
		}
		msgs[i] = m
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	t0 := time.Now()
	for i, m := range msgs {
		f, err := e.js.PublishMsgAsync(m)
		if err != nil {
			return t0, nil, err
		}
		futures[i] = f
	}
	seqs, err := e.pubAcks(ctx, futures)
	return t0, seqs, err
}

// pubAcks waits for the PubAcks and returns the stream sequences.
func (e *env) pubAcks(ctx context.Context, futures []jetstream.PubAckFuture) ([]uint64, error) {
	seqs := make([]uint64, len(futures))
	timeout := time.After(60 * time.Second)
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			return nil, fmt.Errorf("publish: %w", err)
		case <-timeout:
			return nil, errors.New("publish: PubAcks not received within 60s")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return seqs, nil
}

// publishPaced publishes events at rate per second and returns when each
// left and its stream sequence.
func (e *env) publishPaced(ctx context.Context, subjectPrefix string, evs []event, rate float64) ([]time.Time, []uint64, error) {
	at := make([]time.Time, len(evs))
	futures := make([]jetstream.PubAckFuture, len(evs))
	start := time.Now()
	for i, ev := range evs {
		m, err := e.msg(ev)
		if err != nil {
			return nil, nil, err
		}
		if subjectPrefix != "" {
			m.Subject = subjectPrefix + "." + ev.dataset
		}
		if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
			time.Sleep(d) // pacing, not waiting for a condition
		}
		at[i] = time.Now()
		if futures[i], err = e.js.PublishMsgAsync(m); err != nil {
			return nil, nil, err
		}
	}
	seqs, err := e.pubAcks(ctx, futures)
	return at, seqs, err
}

// statusIn is the SQL condition for an audit status filter: "" means
// finished (success or skipped).
func statusIn(status string) string {
	if status == "" {
		return "status IN ('success', 'skipped')"
	}
	return "status = '" + status + "'"
}

// waitAudit waits until want attempts of runs starting with prefix have
// status ("" for success or skipped); a failed one ends the wait with its
// error.
func (e *env) waitAudit(ctx context.Context, prefix, status string, want int, within time.Duration) error {
	q := `SELECT count(*) FILTER (WHERE ` + statusIn(status) + `), count(*) FILTER (WHERE status = 'failed'), max(error)
		FROM idem.pipeline_audit WHERE run_id LIKE $1 || '%'`
	return waitFor(ctx, within, 25*time.Millisecond, fmt.Sprintf("%d finished loads of %s*", want, prefix), func() (bool, error) {
		var done, failed int
		var msg *string
		if err := e.pool.QueryRow(ctx, q, prefix).Scan(&done, &failed, &msg); err != nil {
			return false, err
		}
		if failed > 0 {
			return false, fmt.Errorf("%d load(s) of %s* failed: %s", failed, prefix, deref(msg))
		}
		return done >= want, nil
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// profileHTTP is the http section's lines that turn on Go's profiles, when
// the harness profiles the serves it starts (IDEM_BENCH_PROFILE).
func (e *env) profileHTTP() string {
	if e.profileAddr == "" {
		return ""
	}
	return "  token: " + profileToken + "\n  pprof: true\n"
}
