package service

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestJetStreamNotReady(t *testing.T) {
	for _, c := range []struct {
		err  error
		wait bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("create stream IDEM_EVENTS: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008}), true},
		{context.DeadlineExceeded, false}, // a permissions violation looks like this
		{nats.ErrTimeout, false},
		{jetstream.ErrJetStreamNotEnabled, false},
		{&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabledForAccount}, false},
		{&jetstream.APIError{Code: 403, ErrorCode: 10000}, false},
		{errors.New("nats: permissions violation"), false},
	} {
		require.Equal(t, c.wait, jetStreamNotReady(c.err), "%v", c.err)
	}
}
