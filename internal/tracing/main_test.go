package tracing

import (
	"testing"

	"github.com/idem-data/idem/testkit/pgtest"
)

// The provider starts goroutines: none may outlive its Shutdown.
func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }
