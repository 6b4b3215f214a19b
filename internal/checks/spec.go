package checks

import "strings"

// Spec is one assertion on the rows a load produces, as the load runs it:
// exactly one kind field is set; severity and a threshold may go with it.
// It is plain data, never read from YAML: the config's checks: entries
// (config.Check, whose fields these are and which documents them) are
// turned into Specs, so that this package, and the handlers that run it,
// never link the config.
type Spec struct {
	// Name names the check; empty, DisplayName makes one of the kind and
	// its columns.
	Name string

	// The kinds, one of them set.
	Unique         []string
	NotNull        []string
	AcceptedValues *AcceptedValues
	AcceptedRange  *AcceptedRange
	Relationships  *Relationship
	RowCount       *RowCount
	RowCountChange *RowCountChange
	Expression     string
	SQL            string

	// Severity is SeverityError (the default) or SeverityWarn.
	Severity string
	// MaxFailing or MaxFailingRatio (a share of the rows checked), at most
	// one of them, is how many failing rows pass; neither: none.
	MaxFailing      *int64
	MaxFailingRatio *float64
}

// AcceptedValues: the column's non-NULL values are among Values.
type AcceptedValues struct {
	Column string
	Values []string
}

// AcceptedRange: the column's non-NULL values are within [Min, Max]; either
// bound may be left out. Bounds are written as the column's type reads them
// (0, 1e6, 2026-01-01).
type AcceptedRange struct {
	Column string
	Min    *string
	Max    *string
}

// Relationship: every non-NULL value of Column exists in To's Field.
type Relationship struct {
	Column string
	To     string
	Field  string
}

// RowCount bounds the rows the load produced.
type RowCount struct {
	Min *int64
	Max *int64
}

// RowCountChange bounds the change against the rows the load replaces, as
// shares: MaxDrop 0.5 (at least half as many rows) and MaxRise 4 (at most
// five times as many); either may be left out. MinBaseline skips the check
// when the replaced rows were fewer (default DefaultMinBaseline).
type RowCountChange struct {
	MaxDrop     *float64
	MaxRise     *float64
	MinBaseline *int64
}

// DefaultMinBaseline is row_count_change's min_baseline.
const DefaultMinBaseline = 100

// Kinds of a check.
const (
	KindUnique         = "unique"
	KindNotNull        = "not_null"
	KindAcceptedValues = "accepted_values"
	KindAcceptedRange  = "accepted_range"
	KindRelationships  = "relationships"
	KindRowCount       = "row_count"
	KindRowCountChange = "row_count_change"
	KindExpression     = "expression"
	KindSQL            = "sql"
)

// Severities of a check.
const (
	SeverityError = "error"
	SeverityWarn  = "warn"
)

// Kinds lists the kinds set on c (one, when valid).
func (c Spec) Kinds() []string {
	var out []string
	add := func(set bool, k string) {
		if set {
			out = append(out, k)
		}
	}
	add(len(c.Unique) > 0, KindUnique)
	add(len(c.NotNull) > 0, KindNotNull)
	add(c.AcceptedValues != nil, KindAcceptedValues)
	add(c.AcceptedRange != nil, KindAcceptedRange)
	add(c.Relationships != nil, KindRelationships)
	add(c.RowCount != nil, KindRowCount)
	add(c.RowCountChange != nil, KindRowCountChange)
	add(c.Expression != "", KindExpression)
	add(c.SQL != "", KindSQL)
	return out
}

// Kind is c's kind ("" unless exactly one is set).
func (c Spec) Kind() string {
	if k := c.Kinds(); len(k) == 1 {
		return k[0]
	}
	return ""
}

// DisplayName is Name, or the kind with its columns.
func (c Spec) DisplayName() string {
	if c.Name != "" {
		return c.Name
	}
	switch k := c.Kind(); k {
	case KindUnique:
		return k + "(" + strings.Join(c.Unique, ",") + ")"
	case KindNotNull:
		return k + "(" + strings.Join(c.NotNull, ",") + ")"
	case KindAcceptedValues:
		return k + "(" + c.AcceptedValues.Column + ")"
	case KindAcceptedRange:
		return k + "(" + c.AcceptedRange.Column + ")"
	case KindRelationships:
		return k + "(" + c.Relationships.Column + ")"
	default:
		return k
	}
}

// SeverityOrDefault is Severity, error when unset.
func (c Spec) SeverityOrDefault() string {
	if c.Severity == "" {
		return SeverityError
	}
	return c.Severity
}
