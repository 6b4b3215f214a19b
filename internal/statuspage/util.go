package statuspage

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// cleanKey keeps a partition key from a query: printable, bounded.
func cleanKey(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		return ""
	}
	return s
}

// shortKey is a column's label: 11-28 for a day, 11-28 13h for an hour.
func shortKey(k string) string {
	switch {
	case len(k) == 10 && k[4] == '-':
		return k[5:]
	case len(k) == 20 && k[10] == 'T':
		return k[5:10] + " " + k[11:13] + "h"
	}
	if len(k) > 12 {
		return k[:12] + "…"
	}
	return k
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func deref(p *int64) string {
	if p == nil {
		return ""
	}
	return fmt.Sprint(*p)
}
