package handlers_test

import (
	"flag"
	"os"
)

// make test is deterministic: rapid's checks start from a fixed seed
// unless -rapid.seed names another (0 draws a random one, printed on
// failure). It runs 20 histories per property, sized to make test's
// budget; IDEM_PROPERTY_CHECKS runs more (make property: 500, from a
// random seed, printed).
func init() {
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == "0" {
		_ = f.Value.Set("20261201")
	}
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		n := os.Getenv("IDEM_PROPERTY_CHECKS")
		if n == "" {
			n = "20"
		}
		_ = f.Value.Set(n)
	}
}
