package config

import (
	"fmt"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/internal/calendar"
)

// Duration is a time.Duration written in YAML as a Go duration string:
// "500ms", "10s", "1m30s", "30m", "2h". A bare number is refused, because
// "10" could mean seconds or nanoseconds; the error names the line and the
// field.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a Go duration string, or a whole number of days
// ("7d", "7d12h"). Errors are *yaml.TypeError so
// that the decoder keeps going and reports every bad field at once.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as \"10s\" or \"30m\", found a %s", n.Line, kindName(n.Kind))}}
	}
	v, err := calendar.ParseDuration(n.Value)
	if err != nil {
		hint := `write a Go duration such as "10s", "1m30s", "30m" or "7d"`
		if _, numErr := strconv.Atoi(n.Value); numErr == nil {
			hint = fmt.Sprintf(`add a unit, e.g. "%ss" for seconds`, n.Value)
		}
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration; %s", n.Line, n.Value, hint)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}
