package consumer

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// ConnOptions are the connection behaviours the consumer relies on, for cmd
// to add to its own (URL, credentials, TLS) when it builds the connection:
// reconnect forever (nats.go's default gives up after 60 attempts, about two
// minutes, and the connection is then closed for good), with jitter so
// replicas do not reconnect in step, and log every change of state. URLs are
// logged redacted.
func ConnOptions(log zerolog.Logger) []nats.Option {
	return []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(2 * time.Second),
		nats.ReconnectJitter(500*time.Millisecond, 2*time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			log.Warn().Err(err).Msg("nats: disconnected; reconnecting")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats: reconnected")
		}),
		nats.ReconnectErrHandler(func(nc *nats.Conn, err error) {
			log.Debug().Err(err).Msg("nats: reconnect attempt failed")
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			log.Info().AnErr("last_error", nc.LastError()).Msg("nats: connection closed")
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subscription", sub.Subject)
			}
			ev.Msg("nats: asynchronous error")
		}),
	}
}
