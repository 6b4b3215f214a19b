package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/natsconn"
	"github.com/idem-data/idem/testkit/natstest"
)

const (
	testStream = "EV"
	testDLQ    = "DLQ"
	waitFor    = 15 * time.Second
	tick       = 10 * time.Millisecond
)

// env is one test's world: a fresh nats-server with idem's streams.
type env struct {
	t    *testing.T
	srv  *server.Server
	js   jetstream.JetStream
	cfg  Config
	logs *syncBuffer
	hook *recorder
	// started are the consumers start ran: settled waits for their
	// messages' goroutines, which ack after the load's slot is freed.
	started []*Consumer
}

// newEnv starts a server and creates the streams for the test config, as
// changed by mutate.
func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	e := &env{t: t, logs: &syncBuffer{}, hook: &recorder{}}
	e.srv = natstest.RunServer(t)
	e.js = natstest.JetStream(t, e.srv)
	e.cfg = Config{
		Stream:           testStream,
		DLQStream:        testDLQ,
		Consumer:         "idem",
		SubjectPrefix:    "idem.ready",
		DLQSubjectPrefix: "idem.dlq",
		AckWait:          2 * time.Second,
		MaxInFlight:      4,
		Datasets: map[string]Dataset{
			"orders":    {Retry: Retry{MaxAttempts: 3, Delay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond}},
			"customers": {Retry: Retry{MaxAttempts: 3, Delay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond}},
		},
		FetchWait:        200 * time.Millisecond,
		ShutdownGrace:    5 * time.Second,
		ShutdownNakDelay: 20 * time.Millisecond,
		AckTimeout:       3 * time.Second,
		Log:              zerolog.New(e.logs).With().Timestamp().Logger(),
		Hooks:            e.hook.hooks(),
		Rand:             func() float64 { return 0 },
	}
	if mutate != nil {
		mutate(&e.cfg)
	}
	require.NoError(t, EnsureStreams(context.Background(), e.js, e.cfg.Streams()))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer logs:\n%s", e.logs.String())
		}
	})
	return e
}

// start runs a consumer with h on its own connection; it is stopped, and
// its Run must return nil, when the test ends. stop stops it early and
// returns Run's error.
func (e *env) start(h Handler) (c *Consumer, stop func(grace time.Duration) error) {
	e.t.Helper()
	// Connected as idem serve connects: reconnect forever, state changes logged.
	opts, err := natsconn.Options(config.NATS{}, "consumer test", e.cfg.Log)
	require.NoError(e.t, err)
	nc, err := nats.Connect(e.srv.ClientURL(), opts...)
	require.NoError(e.t, err)
	e.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(e.t, err)
	c, err = New(js, e.cfg, h)
	require.NoError(e.t, err)
	e.started = append(e.started, c)
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	var once sync.Once
	var runErr error
	stop = func(grace time.Duration) error {
		once.Do(func() {
			c.Stop(grace)
			select {
			case runErr = <-done:
			case <-time.After(waitFor):
				runErr = fmt.Errorf("Run did not return within %s of Stop", waitFor)
			}
		})
		return runErr
	}
	e.t.Cleanup(func() { require.NoError(e.t, stop(time.Second)) })
	return c, stop
}

// reconciler runs a Reconciler on its own connection until the test ends.
func (e *env) reconciler() {
	e.t.Helper()
	r, err := NewReconciler(natstest.JetStream(e.t, e.srv), e.cfg)
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		require.NoError(e.t, <-done)
	})
}

func event(dataset, partition, runID string) []byte {
	return []byte(fmt.Sprintf(`{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID))
}

// publish stores a message in the events stream and returns its sequence.
func (e *env) publish(subject string, body []byte, h nats.Header) uint64 {
	e.t.Helper()
	ack, err := e.js.PublishMsg(context.Background(), &nats.Msg{Subject: subject, Data: body, Header: h})
	require.NoError(e.t, err)
	return ack.Sequence
}

func (e *env) streamMsgs(name string) uint64 {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), name)
	require.NoError(e.t, err)
	info, err := s.Info(context.Background())
	require.NoError(e.t, err)
	return info.State.Msgs
}

// deadLetters waits until the DLQ holds n messages and returns them.
func (e *env) deadLetters(n int) []*jetstream.RawStreamMsg {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return e.streamMsgs(testDLQ) >= uint64(n) }, waitFor, tick, "waiting for %d dead letters", n)
	s, err := e.js.Stream(context.Background(), testDLQ)
	require.NoError(e.t, err)
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); len(out) < n; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		require.NoError(e.t, err)
		out = append(out, m)
	}
	return out
}

func (e *env) consumerInfo() *jetstream.ConsumerInfo {
	e.t.Helper()
	c, err := e.js.Consumer(context.Background(), testStream, e.cfg.Consumer)
	require.NoError(e.t, err)
	info, err := c.Info(context.Background())
	require.NoError(e.t, err)
	return info
}

// settled waits until every message up to seq left the pending set (acked
// or terminated, none waiting for redelivery) and the consumers hold none:
// their hooks have run.
func (e *env) settled(seq uint64) *jetstream.ConsumerInfo {
	e.t.Helper()
	var info *jetstream.ConsumerInfo
	require.Eventually(e.t, func() bool {
		info = e.consumerInfo()
		for _, c := range e.started {
			if c.held.Load() > 0 {
				return false
			}
		}
		return info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream >= seq && e.hook.held() == 0
	}, waitFor, tick, "waiting for the consumer to settle up to %d", seq)
	return info
}

// recorder counts hook calls.
type recorder struct {
	mu          sync.Mutex
	events      map[string]int // dataset/outcome
	deadLetters map[string]int // dataset/kind
	redelivered int
	heartbeats  int
	inFlight    int
	maxInFlight int
	circuit     []bool // every Circuit hook call: false opened, true closed
	// laneMax is the most loads each lane reported running (LaneInFlight).
	laneMax map[string]int
}

func (r *recorder) hooks() Hooks {
	r.events, r.deadLetters, r.laneMax = map[string]int{}, map[string]int{}, map[string]int{}
	return Hooks{
		Event: func(ds string, o Outcome, _ time.Duration) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events[ds+"/"+string(o)]++
		},
		DeadLetter: func(ds string, k Kind) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.deadLetters[ds+"/"+string(k)]++
		},
		Redelivery: func(string) { r.mu.Lock(); r.redelivered++; r.mu.Unlock() },
		Heartbeat:  func(string) { r.mu.Lock(); r.heartbeats++; r.mu.Unlock() },
		Circuit:    func(up bool) { r.mu.Lock(); r.circuit = append(r.circuit, up); r.mu.Unlock() },
		InFlight: func(n int) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.inFlight = n
			r.maxInFlight = max(r.maxInFlight, n)
		},
		LaneInFlight: func(lane string, n int) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.laneMax[lane] = max(r.laneMax[lane], n)
		},
	}
}

func (r *recorder) event(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[key]
}

func (r *recorder) deadLetter(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deadLetters[key]
}

func (r *recorder) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight
}

func (r *recorder) circuitChanges() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.circuit...)
}

func (r *recorder) heartbeatCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heartbeats
}

// syncBuffer is a log sink shared by goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines decodes every JSON log line.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	var out []map[string]any
	for _, l := range bytes.Split([]byte(b.String()), []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(l, &m), "log line %s", l)
		out = append(out, m)
	}
	return out
}

// calls records handler invocations.
type calls struct {
	mu   sync.Mutex
	msgs []Message
	at   []time.Time
}

func (c *calls) add(m *Message) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, *m)
	c.at = append(c.at, time.Now())
	return len(c.msgs)
}

func (c *calls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *calls) snapshot() ([]Message, []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Message(nil), c.msgs...), append([]time.Time(nil), c.at...)
}

// waitEvent waits until the hook has counted n events of key. The hook is
// called after the message is settled and its load slot freed, so a test
// that saw the consumer settle may still be a moment ahead of it.
func (r *recorder) waitEvent(t *testing.T, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return r.event(key) == n }, waitFor, tick, "hook events %s: %d, want %d", key, r.event(key), n)
}

// waitDeadLetter is waitEvent for the dead-letter hook.
func (r *recorder) waitDeadLetter(t *testing.T, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return r.deadLetter(key) == n }, waitFor, tick, "hook dead letters %s: %d, want %d", key, r.deadLetter(key), n)
}
