package natsconn

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's error codes for a publish the stream will not store.
const (
	codeStoreFailed          = 10077 // the stream's limit: maximum messages or bytes exceeded (discard new)
	codeInsufficientResource = 10023 // the server has no room for the stream
	codeStorageExceeded      = 10047 // the account's or server's JetStream storage is used up
)

// StoreRefused says why JetStream refused to store a published message,
// when it was for room: the stream reached its max_msgs or max_bytes with
// discard new, or JetStream's storage is used up. ok is false for any other
// error.
func StoreRefused(err error) (why string, ok bool) {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return "", false
	}
	switch apiErr.ErrorCode {
	case codeStoreFailed:
		return "the stream is full (" + apiErr.Description + "): its max_msgs or max_bytes is reached and it discards new messages", true
	case codeInsufficientResource, codeStorageExceeded:
		return "JetStream has no storage left (" + apiErr.Description + ")", true
	}
	return "", false
}
