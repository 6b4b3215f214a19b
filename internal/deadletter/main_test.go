package deadletter

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops the servers and connections it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
