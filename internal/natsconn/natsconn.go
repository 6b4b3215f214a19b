// Package natsconn is the one definition of how idem connects to NATS. From
// the config's nats section it builds the options every idem connection uses
// (the service's, and those of operator commands such as streams, publish or
// validate): auth (user/password, token, nkey seed, creds file), TLS, and the
// behaviour a daemon relies on: reconnecting forever with jitter, so
// replicas do not reconnect in step, with every disconnect, reconnect, close
// and asynchronous error logged under stable messages ("nats: disconnected;
// reconnecting", "nats: reconnected").
//
// Package consumer never builds a connection and does not import this
// package: it receives one. natsconn never logs a secret: server URLs are
// logged redacted.
package natsconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/internal/config"
)

// Options turns the config into nats.go options. name identifies the client in
// the server's monitoring (e.g. "idem serve").
func Options(cfg config.NATS, name string, log zerolog.Logger) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(name),
		// nats.go gives up after 60 attempts by default and closes the
		// connection for good; a daemon must outlive a long broker outage.
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(500*time.Millisecond, 2*time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn().Err(err).Msg("nats: disconnected; reconnecting")
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info().Str("server", c.ConnectedUrlRedacted()).Msg("nats: reconnected")
		}),
		nats.ClosedHandler(func(_ *nats.Conn) { log.Info().Msg("nats: connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats: async error")
		}),
	}
	switch {
	case cfg.Creds != "":
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	case cfg.NKey != "":
		opt, err := nats.NkeyOptionFromSeed(cfg.NKey)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey: %w", err)
		}
		opts = append(opts, opt)
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	}
	if t := cfg.TLS; t.CA != "" || t.Cert != "" || t.InsecureSkipVerify {
		if t.CA != "" {
			opts = append(opts, nats.RootCAs(t.CA))
		}
		if t.Cert != "" {
			opts = append(opts, nats.ClientCert(t.Cert, t.Key))
		}
		if t.InsecureSkipVerify {
			opts = append(opts, nats.Secure(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})) //nolint:gosec // tests only, documented
		} else {
			opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}))
		}
	}
	return opts, nil
}

// Connect dials the servers; the first connection must succeed within ctx (or
// 10 s), after which reconnects go on forever.
func Connect(ctx context.Context, cfg config.NATS, name string, log zerolog.Logger) (*nats.Conn, error) {
	opts, err := Options(cfg, name, log)
	if err != nil {
		return nil, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	opts = append(opts, nats.Timeout(timeout))
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) {
			return nil, fmt.Errorf("cannot reach NATS at %s: %w", redactURL(cfg.URL), err)
		}
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	return nc, nil
}

// redactURL hides credentials in a comma-separated list of server URLs.
func redactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "REDACTED"
			continue
		}
		if u.User != nil {
			u.User = url.User("REDACTED")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
