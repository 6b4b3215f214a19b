package lineage

import (
	"testing"

	"github.com/idem-data/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
