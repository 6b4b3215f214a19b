package handlers_test

import "flag"

// make test is deterministic: rapid's checks start from a fixed seed
// unless -rapid.seed names another (0 draws a random one, printed on
// failure).
func init() {
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == "0" {
		_ = f.Value.Set("20261201")
	}
}
