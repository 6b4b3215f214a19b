package consumer

import (
	"sync"
	"time"
)

// heartbeat tells JetStream a message is still being worked on: InProgress
// every interval resets the message's ack timer, so a handler (or a wait for
// its dataset's turn) longer than AckWait keeps the message to itself. If
// the process dies, the heartbeats stop and the message comes back after
// AckWait.
type heartbeat struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startHeartbeat calls inProgress every interval until stopped.
func startHeartbeat(interval time.Duration, inProgress func() error, onBeat func(error)) *heartbeat {
	hb := &heartbeat{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(hb.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-hb.stop:
				return
			case <-t.C:
				onBeat(inProgress())
			}
		}
	}()
	return hb
}

// Stop ends the heartbeats and returns once none can be sent any more, so an
// InProgress never follows the message's final ack.
func (hb *heartbeat) Stop() {
	hb.once.Do(func() { close(hb.stop) })
	<-hb.done
}
