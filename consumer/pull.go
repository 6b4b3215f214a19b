package consumer

import (
	"context"
	"time"
)

// pullContext is one pull request's context. Its Deadline is when the
// server is to end the pull (jetstream.FetchContext takes the request's
// expiry from it), but the client gives the pull up only when the context
// is cancelled: when stopping, or when the lanes take a backfill pull's
// slots back. A client that stopped listening at the deadline would lose
// what the server sent just before its own end of the pull (a request
// reaches the server late on a busy machine, and a message arriving with
// the deadline may lose the race to it), and JetStream, which counts it
// as delivered, sends it again only after the ack wait: seen as a live
// event that waited out a whole backfill. The fetch ends when the server
// ends the request, or a second after its expiry (the client library's
// own limit) if the server's end never comes.
type pullContext struct {
	context.Context
	deadline time.Time
}

func (p pullContext) Deadline() (time.Time, bool) { return p.deadline, true }

// pull returns the context of a pull request the server ends after about
// wait, under parent, and its cancellation.
func pull(parent context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	return pullContext{Context: ctx, deadline: time.Now().Add(wait)}, cancel
}
