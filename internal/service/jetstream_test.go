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
	perm := fmt.Errorf("%w: Permissions Violation for Publish to \"$JS.API.STREAM.CREATE.IDEM_EVENTS\"", nats.ErrPermissionViolation)
	for _, c := range []struct {
		err, conn error
		wait      bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, nil, true},
		{fmt.Errorf("create stream IDEM_EVENTS: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008}), nil, true},
		{context.DeadlineExceeded, nil, true}, // a cluster that lost its leader, at first
		{nats.ErrTimeout, nil, true},
		{context.DeadlineExceeded, perm, false}, // a permissions violation looks like this
		{fmt.Errorf("create stream: %w", nats.ErrTimeout), perm, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}, nil, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, insufficient resources"}, nil, false},
		{jetstream.ErrJetStreamNotEnabled, nil, false},
		{nats.ErrNoResponders, nil, false},
		{&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabledForAccount}, nil, false},
		{&jetstream.APIError{Code: 403, ErrorCode: 10000}, nil, false},
		{errors.New("nats: permissions violation"), nil, false},
	} {
		require.Equal(t, c.wait, jetStreamNotReady(c.err, c.conn), "%v (connection: %v)", c.err, c.conn)
	}
}
