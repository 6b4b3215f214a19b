package service

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/localpg"
)

// TestStartWaitsForJetStreamQuorum: idem serve starting while only one of
// three clustered servers is up (two lost at once, a cluster coming back
// after maintenance) is told "no suitable peers for placement, peer
// offline" for its R3 streams, then, once the server notices it lost its
// quorum, nothing for some seconds and then 503 "JetStream system
// temporarily unavailable". It waits through all three, says so once per
// answer, and creates its streams when the other two servers are back,
// instead of exiting into a supervisor's crash loop.
func TestStartWaitsForJetStreamQuorum(t *testing.T) {
	t.Parallel()
	names := []string{"n0", "n1", "n2"}
	client, routes := make([]int, 3), make([]int, 3)
	for i := range names {
		var err error
		client[i], err = localpg.FreePort()
		require.NoError(t, err)
		routes[i], err = localpg.FreePort()
		require.NoError(t, err)
	}
	stores := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var routeURLs []*url.URL
	for _, p := range routes {
		routeURLs = append(routeURLs, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	start := func(i int) *server.Server {
		s, err := server.NewServer(&server.Options{
			ServerName: names[i], Host: "127.0.0.1", Port: client[i],
			JetStream: true, StoreDir: stores[i], NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "idem-test", Host: "127.0.0.1", Port: routes[i]},
			Routes:  routeURLs,
		})
		require.NoError(t, err)
		go s.Start()
		require.True(t, s.ReadyForConnections(10*time.Second), "server %s did not start", names[i])
		t.Cleanup(s.Shutdown)
		return s
	}
	servers := []*server.Server{start(0), start(1), start(2)}

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", client[0]))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	sc := consumer.StreamsConfig{
		Stream: "IDEM_EVENTS", SubjectPrefix: "idem.ready", DLQStream: "IDEM_DLQ", DLQSubjectPrefix: "idem.dlq",
		Consumer: "idem", AckWait: 30 * time.Second, MaxDeliver: 1000, Replicas: 3,
	}.WithDefaults()

	// The cluster has formed: its JetStream answers.
	require.Eventually(t, func() bool {
		actx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(actx)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the cluster elected no JetStream leader")
	// Two of three go away: the one left has no quorum.
	servers[1].Shutdown()
	servers[2].Shutdown()
	servers[1].WaitForShutdown()
	servers[2].WaitForShutdown()

	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ensureStreamsWaiting(ctx, js, sc, zerolog.New(logs)) }()

	waited := time.After(30 * time.Second)
	for !strings.Contains(logs.String(), "waiting for the server to start") {
		select {
		case err := <-done:
			t.Fatalf("the start ended without a quorum: %v\n%s", err, logs.String())
		case <-waited:
			t.Fatalf("one server of three: the start neither waited nor ended in 30s:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.Contains(t, logs.String(), `"server":"jetstream"`)

	start(1)
	start(2)
	select {
	case err := <-done:
		require.NoError(t, err, logs.String())
	case <-ctx.Done():
		t.Fatalf("the start did not resume once the cluster had a quorum:\n%s", logs.String())
	}
	require.Contains(t, logs.String(), "server reachable: starting")
	for _, name := range []string{sc.Stream, sc.DLQStream} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, info.Config.Replicas, name)
	}
	_, err = js.Consumer(ctx, sc.Stream, sc.Consumer)
	require.NoError(t, err, "the durable consumer exists")
}
