package pgxtrace

import (
	"testing"

	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }
