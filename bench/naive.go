package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
)

// runNaive is the consumer people write first: a nats.go pull consumer whose
// c workers run INSERT .. SELECT for each event (one statement, its own
// transaction) and ack after the commit. No ledger, no lock, no audit: a
// redelivered event doubles its rows. It publishes evs (at once when rate is
// 0, else paced) and returns the time from the first publish to the last
// commit, and with a rate each event's publish-to-commit latency.
func (e *env) runNaive(ctx context.Context, c int, evs []event, rate float64) (time.Duration, []time.Duration, error) {
	if err := e.exec(ctx, "TRUNCATE bench.naive_t"); err != nil {
		return 0, nil, err
	}
	if err := e.settle(ctx); err != nil {
		return 0, nil, err
	}
	if err := e.js.DeleteStream(ctx, naiveStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil, err
	}
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: naiveStream, Subjects: []string{naiveSubject + ".>"}, Storage: jetstream.FileStorage})
	if err != nil {
		return 0, nil, err
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "naive", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxAckPending: 10000,
	})
	if err != nil {
		return 0, nil, err
	}

	n := len(evs)
	doneAt := make([]time.Time, n)
	var done atomic.Int64
	all := make(chan struct{})
	failed := make(chan error, 1)
	msgs := make(chan jetstream.Msg, c)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range c {
		conn, err := pgx.Connect(ctx, e.dbURL)
		if err != nil {
			return 0, nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close(context.WithoutCancel(ctx))
			for {
				var m jetstream.Msg
				select {
				case m = <-msgs:
				case <-quit:
					return
				}
				var ev struct {
					Partition string `json:"partition"`
				}
				err := json.Unmarshal(m.Data(), &ev)
				if err == nil {
					_, err = conn.Exec(ctx, naiveInsert, ev.Partition)
				}
				if err == nil {
					err = m.Ack()
				}
				meta, merr := m.Metadata()
				if err == nil && merr != nil {
					err = merr
				}
				if err != nil {
					select {
					case failed <- fmt.Errorf("naive consumer: %w", err):
					default:
					}
					continue
				}
				if i := int(meta.Sequence.Stream) - 1; i >= 0 && i < n {
					doneAt[i] = time.Now()
				}
				if done.Add(1) == int64(n) {
					close(all)
				}
			}
		}()
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-quit:
		}
	}, jetstream.PullMaxMessages(2*c))
	if err != nil {
		close(quit)
		wg.Wait()
		return 0, nil, err
	}
	stop := func() { cc.Stop(); close(quit); wg.Wait() }

	var t0 time.Time
	var at []time.Time
	if rate > 0 {
		at, _, err = e.publishPaced(ctx, naiveSubject, evs, rate)
		if len(at) > 0 {
			t0 = at[0]
		}
	} else {
		t0, _, err = e.publishBurst(ctx, naiveSubject, evs)
	}
	if err != nil {
		stop()
		return 0, nil, err
	}
	select {
	case <-all:
	case err := <-failed:
		stop()
		return 0, nil, err
	case <-time.After(2*time.Minute + time.Duration(n)*20*time.Millisecond):
		stop()
		return 0, nil, fmt.Errorf("naive consumer: %d of %d events after the timeout", done.Load(), n)
	}
	stop()
	var last time.Time
	for _, t := range doneAt {
		if t.After(last) {
			last = t
		}
	}
	var lat []time.Duration
	if at != nil {
		lat = make([]time.Duration, n)
		for i := range lat {
			lat[i] = doneAt[i].Sub(at[i])
		}
	}
	return last.Sub(t0), lat, nil
}
