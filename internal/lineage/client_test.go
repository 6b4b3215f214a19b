package lineage

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type received struct {
	path, auth, contentType string
	body                    []byte
}

func backend(t *testing.T, status int, answer string) (*httptest.Server, chan received) {
	t.Helper()
	got := make(chan received, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- received{r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), b}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestClientSend(t *testing.T) {
	t.Parallel()
	event, err := sampleAttempt().Start(sampleTime).Marshal()
	require.NoError(t, err)

	tests := []struct {
		name   string
		status int
		answer string
		fatal  *bool // nil: delivered
		msg    string
	}{
		{"200", http.StatusOK, "", nil, ""},
		{"201, as Marquez answers", http.StatusCreated, "", nil, ""},
		{"400 drops", http.StatusBadRequest, "{\"error\":\"eventTime\nmissing\"}\x00", ptr(true), `400 Bad Request: {"error":"eventTime missing"}`},
		{"401 drops", http.StatusUnauthorized, "", ptr(true), "401 Unauthorized"},
		{"422 drops", http.StatusUnprocessableEntity, "", ptr(true), "422"},
		{"408 retries", http.StatusRequestTimeout, "", ptr(false), "408"},
		{"429 retries", http.StatusTooManyRequests, "", ptr(false), "429 Too Many Requests"},
		{"500 retries", http.StatusInternalServerError, "boom", ptr(false), "500 Internal Server Error: boom"},
		{"503 retries", http.StatusServiceUnavailable, "", ptr(false), "503 Service Unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, got := backend(t, tt.status, tt.answer)
			c, err := NewClient(ClientConfig{URL: srv.URL + "/", APIKey: "s3cret-key"})
			require.NoError(t, err)
			err = c.Send(context.Background(), event)
			r := <-got
			require.Equal(t, "/api/v1/lineage", r.path)
			require.Equal(t, "Bearer s3cret-key", r.auth)
			require.Equal(t, "application/json", r.contentType)
			require.Equal(t, event, r.body)
			if tt.fatal == nil {
				require.NoError(t, err)
				return
			}
			var se *SendError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tt.status, se.StatusCode)
			require.Equal(t, *tt.fatal, se.Fatal())
			require.Contains(t, err.Error(), tt.msg)
			require.NotContains(t, err.Error(), "s3cret-key")
			var fatal interface{ Fatal() bool }
			require.True(t, errors.As(err, &fatal), "the relay classifies it without importing lineage")
		})
	}
}

func TestClientTimeoutRetries(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select { // a backend that never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first
	c, err := NewClient(ClientConfig{URL: srv.URL, Timeout: 50 * time.Millisecond})
	require.NoError(t, err)
	err = c.Send(context.Background(), []byte(`{}`))
	var se *SendError
	require.ErrorAs(t, err, &se)
	require.False(t, se.Fatal(), "a timeout is worth another try")
	require.Zero(t, se.StatusCode)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestClientUnreachableRetries(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now

	c, err := NewClient(ClientConfig{URL: "http://" + addr})
	require.NoError(t, err)
	err = c.Send(context.Background(), []byte(`{}`))
	var se *SendError
	require.ErrorAs(t, err, &se)
	require.False(t, se.Fatal())
	require.Contains(t, err.Error(), "lineage: sending the event")
}

func TestClientCancelledRetries(t *testing.T) {
	t.Parallel()
	srv, _ := backend(t, http.StatusOK, "")
	c, err := NewClient(ClientConfig{URL: srv.URL})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // shutting down
	err = c.Send(ctx, []byte(`{}`))
	var se *SendError
	require.ErrorAs(t, err, &se)
	require.False(t, se.Fatal(), "an event not sent because idem stops is sent later")
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	c, err := NewClient(ClientConfig{URL: "https://lineage.example.com/openapi/openlineage"})
	require.NoError(t, err)
	require.Equal(t, "https://lineage.example.com/openapi/openlineage/api/v1/lineage", c.URL())
	c, err = NewClient(ClientConfig{URL: "http://om:8585", Endpoint: "/api/v1/openlineage/lineage"})
	require.NoError(t, err)
	require.Equal(t, "http://om:8585/api/v1/openlineage/lineage", c.URL())

	for _, bad := range []string{"", "marquez:5000", "ftp://marquez", "http://", "http://u:p@marquez:5000", "http://%zz"} {
		_, err := NewClient(ClientConfig{URL: bad})
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), ":p@", "no password in the message")
	}
}

func ptr[T any](v T) *T { return &v }
