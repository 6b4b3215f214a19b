// Package natstest runs a real, in-process NATS server with JetStream for
// tests: no Docker, no child process, a fresh store per test. The server is
// internal/embeddednats, the one `idem dev` runs; this package only ties it
// to a test's lifetime. It must never be imported by non-test code.
package natstest

import (
	"context"
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
		t.Fatalf("natstest: %v", err)
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
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream connects to s and returns its JetStream context.
func JetStream(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, s))
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}

// FillStream makes stream full: its max_msgs becomes n (0: the messages it
// holds now) and it discards new messages, so JetStream refuses the next
// publish as a full stream does. The returned func restores its config.
func FillStream(t testing.TB, js jetstream.JetStream, stream string, n int64) (restore func()) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("natstest: stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("natstest: stream %s: %v", stream, err)
	}
	full := info.Config
	if n == 0 {
		n = int64(info.State.Msgs)
	}
	full.MaxMsgs, full.Discard = n, jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatalf("natstest: fill %s: %v", stream, err)
	}
	return func() {
		t.Helper()
		if _, err := js.UpdateStream(ctx, info.Config); err != nil {
			t.Fatalf("natstest: restore %s: %v", stream, err)
		}
	}
}
