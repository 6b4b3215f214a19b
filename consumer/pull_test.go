package consumer

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A message the server sends as a pull request ends reaches the consumer:
// the server ends each pull before the consumer stops listening to it, so
// nothing is sent to a request already given up (which JetStream counts
// as delivered, and sends again only after the ack wait). With pulls of a
// few milliseconds, hundreds of events published at random moments fall
// on the ends of pulls; each must run at its first delivery.
func TestMessagesSentAsAPullEndsRunAtTheirFirstDelivery(t *testing.T) {
	const events = 300
	e := newEnv(t, func(c *Config) {
		c.FetchWait = 10 * time.Millisecond
		c.AckWait = 30 * time.Second // a lost delivery shows as a late one, not a quick retry
	})
	var (
		mu        sync.Mutex
		delivered = map[string]int{}
	)
	e.start(func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		delivered[m.Event.Partition] = m.NumDelivered
		return nil
	})
	rng := rand.New(rand.NewPCG(1, 2))
	day := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range events {
		e.publish("idem.ready.orders", event("orders", day.AddDate(0, 0, i).Format(time.DateOnly), "run"), nil)
		time.Sleep(time.Duration(rng.IntN(int(7 * time.Millisecond))))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == events
	}, 10*time.Second, tick, "every event ran within 10 s, well before the ack wait sends a lost one again")
	mu.Lock()
	defer mu.Unlock()
	for p, n := range delivered {
		require.Equal(t, 1, n, "partition %s ran at delivery %d", p, n)
	}
}
