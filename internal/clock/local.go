//go:build !idemtest

package clock

import "time"

func local() time.Time { return time.Now() }
