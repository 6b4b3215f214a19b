package consumer

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it starts: consumers, reconcilers, heartbeats,
// connections and servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
