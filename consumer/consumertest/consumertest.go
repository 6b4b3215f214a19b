// Package consumertest runs a real, in-process NATS server with JetStream for
// tests: no Docker, no child process, a fresh store per test. The server is
// internal/embeddednats, the one `idem dev` runs; this package only ties it
// to a test's lifetime. It must never be imported by non-test code.
package consumertest

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/internal/embeddednats"
)

// RunServer starts a JetStream-enabled nats-server on a random loopback port
// with its store in a temporary directory, and shuts it down when the test
// ends.
func RunServer(t testing.TB) *server.Server {
	t.Helper()
	return run(t, embeddednats.Options{StoreDir: t.TempDir()})
}

// Restart shuts s down and starts a server on the same port with the same
// store, as an operator's restart does: streams, consumers and their state
// survive, clients see a disconnection and reconnect.
func Restart(t testing.TB, s *server.Server) *server.Server {
	t.Helper()
	o := embeddednats.Options{
		Port:     s.Addr().(*net.TCPAddr).Port,
		StoreDir: filepath.Dir(s.StoreDir()), // StoreDir adds "jetstream"
	}
	s.Shutdown()
	s.WaitForShutdown()
	return run(t, o)
}

func run(t testing.TB, o embeddednats.Options) *server.Server {
	t.Helper()
	s, err := embeddednats.Start(o)
	if err != nil {
		t.Fatalf("consumertest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s.Server
}

// Connect opens a connection to s that is closed when the test ends. It
// reconnects forever, as idem's own connections do.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("consumertest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream connects to s and returns its JetStream context.
func JetStream(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, s))
	if err != nil {
		t.Fatalf("consumertest: jetstream: %v", err)
	}
	return js
}
