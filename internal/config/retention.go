package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Audit is what idem keeps of its audit table.
type Audit struct {
	// Retention is how long attempts stay in idem.pipeline_audit: `idem
	// serve` prunes older ones, except each partition's latest attempt and
	// latest success (the ledger is never pruned). nil means
	// DefaultAuditRetention; Forever keeps everything.
	Retention *Retention `yaml:"retention,omitempty"`
}

// DefaultAuditRetention keeps 90 days of attempts: a quarter of history to
// investigate, far longer than any retry or redelivery of an event, while an
// hourly pipeline of 1,000 datasets keeps about 2.2M rows instead of 8.8M
// more each year.
var DefaultAuditRetention = Retention{Days: 90}

// MinAuditRetentionDays is the shortest retention accepted: a week keeps
// the attempts of messages still retrying and of recent dead letters.
const MinAuditRetentionDays = 7

// maxAuditRetentionDays keeps the retention a valid interval (100 years).
const maxAuditRetentionDays = 36500

// Retention is a whole number of days, written "90d"; "forever" or 0 keeps
// everything.
type Retention struct {
	// Days; 0 means forever.
	Days int
}

// Forever reports that nothing is pruned.
func (r Retention) Forever() bool { return r.Days == 0 }

// Std is the retention as a duration; 0 for forever.
func (r Retention) Std() time.Duration { return time.Duration(r.Days) * 24 * time.Hour }

// String writes r as YAML does: "90d" or "forever".
func (r Retention) String() string {
	if r.Forever() {
		return "forever"
	}
	return fmt.Sprintf("%dd", r.Days)
}

// ParseRetention reads "90d", "forever", or 0 ("0", "0d").
func ParseRetention(s string) (Retention, error) {
	if s == "forever" {
		return Retention{}, nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "d"))
	if err != nil || n < 0 || n > maxAuditRetentionDays || (n != 0 && !strings.HasSuffix(s, "d")) {
		return Retention{}, fmt.Errorf(`%q is not a retention; write a number of days such as "90d", or "forever" to keep everything`, s)
	}
	return Retention{Days: n}, nil
}

// UnmarshalYAML parses a retention. Errors are *yaml.TypeError so that the
// decoder keeps going and reports every bad field at once.
func (r *Retention) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf(`line %d: want a retention such as "90d" or "forever", found a %s`, n.Line, kindName(n.Kind))}}
	}
	v, err := ParseRetention(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*r = v
	return nil
}

// MarshalYAML writes r as "90d" or "forever".
func (r Retention) MarshalYAML() (any, error) { return r.String(), nil }

// AuditRetention is the retention in force: Audit.Retention, or
// DefaultAuditRetention when unset.
func (c *Config) AuditRetention() Retention {
	if c.Audit.Retention == nil {
		return DefaultAuditRetention
	}
	return *c.Audit.Retention
}

func validateAudit(v *validator, a Audit) {
	if a.Retention == nil || a.Retention.Forever() {
		return
	}
	if d := a.Retention.Days; d < MinAuditRetentionDays || d > maxAuditRetentionDays {
		v.add("audit.retention", "%dd is out of range; keep at least %dd (attempts of messages still retrying and of recent dead letters), at most %dd, or write forever",
			d, MinAuditRetentionDays, maxAuditRetentionDays)
	}
}
