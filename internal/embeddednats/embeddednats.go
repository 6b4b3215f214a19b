// Package embeddednats runs a NATS server with JetStream inside this process,
// for `idem dev` and for tests. It listens on 127.0.0.1 only and keeps its
// store in a directory the caller owns. Production never uses it.
package embeddednats

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options for the embedded server.
type Options struct {
	Port     int    // 0: a free port; -1 is the same
	StoreDir string // JetStream store; required
	// Config, when set, is a nats-server config file (auth, TLS) applied
	// before Port and StoreDir.
	Config string
	// MaxStore is JetStream's file storage limit in bytes; 0 leaves the
	// server's own, three quarters of the store directory's free space
	// when it starts.
	MaxStore int64
}

// Server is a running embedded server.
type Server struct {
	*server.Server
	opts *server.Options
}

// Start runs a server and waits until it accepts clients.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embeddednats: StoreDir is required")
	}
	opts := &server.Options{}
	if o.Config != "" {
		var err error
		if opts, err = server.ProcessConfigFile(o.Config); err != nil {
			return nil, fmt.Errorf("embeddednats: %w", err)
		}
	}
	opts.Host = "127.0.0.1"
	opts.Port = o.Port
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	opts.JetStream = true
	opts.StoreDir = o.StoreDir
	if o.MaxStore > 0 {
		opts.JetStreamMaxStore = o.MaxStore
	}
	opts.NoSigs = true
	opts.NoLog = true
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: %w", err)
	}
	s.Start() // returns once the listeners run
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embeddednats: server not ready after 10s")
	}
	return &Server{Server: s, opts: opts}, nil
}

// URL is the client URL, e.g. nats://127.0.0.1:4222.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
