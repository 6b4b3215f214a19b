package embeddednats_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idem-data/idem/internal/embeddednats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRestartOnTheSamePortKeepsTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	s, err := embeddednats.Start(embeddednats.Options{StoreDir: dir})
	require.NoError(t, err)
	port := s.Addr().(*net.TCPAddr).Port
	require.NotZero(t, port)

	nc, err := nats.Connect(s.URL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "t.x", []byte("x"))
	require.NoError(t, err)
	nc.Close()
	s.Stop()

	s, err = embeddednats.Start(embeddednats.Options{StoreDir: dir, Port: port})
	require.NoError(t, err)
	defer s.Stop()
	require.Equal(t, port, s.Addr().(*net.TCPAddr).Port)
	nc, err = nats.Connect(s.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err = jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "T")
	require.NoError(t, err, "the stream survives the restart")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs)
}

func TestStartNeedsAStoreDir(t *testing.T) {
	_, err := embeddednats.Start(embeddednats.Options{})
	require.ErrorContains(t, err, "StoreDir")
}
