package calendar

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDuration is time.ParseDuration with a leading whole number of days
// ("7d", "1d12h"): how a duration is written in the config and on the
// command line.
func ParseDuration(s string) (time.Duration, error) {
	i := strings.IndexByte(s, 'd')
	if i <= 0 {
		return time.ParseDuration(s)
	}
	days, err := strconv.Atoi(s[:i])
	if err != nil || days < 0 || days > 100_000 {
		return time.ParseDuration(s)
	}
	d := time.Duration(days) * 24 * time.Hour
	if rest := s[i+1:]; rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || r < 0 {
			return 0, fmt.Errorf("time: invalid duration %q", s)
		}
		d += r
	}
	return d, nil
}
