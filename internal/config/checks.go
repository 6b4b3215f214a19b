package config

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/sqlcheck"
)

// Check is one assertion on the rows a load produces (checks:). Exactly one
// kind field is set; severity and a threshold may go with it:
//
//	checks:
//	  - unique: [order_id]
//	  - not_null: [order_id, total]
//	  - accepted_values: {column: status, values: [paid, refunded]}
//	  - accepted_range: {column: total, min: 0, max: 100000}
//	  - relationships: {column: customer_id, to: analytics.dim_customers, field: customer_id}
//	  - row_count: {min: 1, max: 5000000}
//	  - row_count_change: {max_drop: 50%, max_rise: 400%}
//	  - expression: "total >= 0 OR status = 'refunded'"
//	  - sql: "SELECT order_id FROM analytics.fact_orders WHERE event_date = @partition AND total > 1e6"
//	  - {not_null: [email], severity: warn, max_failing: 10}
type Check struct {
	// Name names the check in outcomes, logs and metrics; default the kind
	// and its columns (not_null(order_id,total)).
	Name string `yaml:"name,omitempty" json:",omitempty"`

	Unique         []string        `yaml:"unique,omitempty" json:",omitempty"`
	NotNull        []string        `yaml:"not_null,omitempty" json:",omitempty"`
	AcceptedValues *AcceptedValues `yaml:"accepted_values,omitempty" json:",omitempty"`
	AcceptedRange  *AcceptedRange  `yaml:"accepted_range,omitempty" json:",omitempty"`
	Relationships  *Relationship   `yaml:"relationships,omitempty" json:",omitempty"`
	RowCount       *RowCount       `yaml:"row_count,omitempty" json:",omitempty"`
	RowCountChange *RowCountChange `yaml:"row_count_change,omitempty" json:",omitempty"`
	Expression     string          `yaml:"expression,omitempty" json:",omitempty"`
	SQL            string          `yaml:"sql,omitempty" json:",omitempty"`

	// Severity is error (the default: a failure rolls the load back) or
	// warn (the load commits; the outcome is recorded).
	Severity string `yaml:"severity,omitempty" json:",omitempty"`
	// MaxFailing is how many failing rows pass (default 0);
	// MaxFailingRatio the same as a share of the rows checked (0.01 = 1%).
	// At most one of them.
	MaxFailing      *int64   `yaml:"max_failing,omitempty" json:",omitempty"`
	MaxFailingRatio *float64 `yaml:"max_failing_ratio,omitempty" json:",omitempty"`
}

// AcceptedValues: the column's non-NULL values are among Values.
type AcceptedValues struct {
	Column string   `yaml:"column"`
	Values []string `yaml:"values"`
}

// AcceptedRange: the column's non-NULL values are within [Min, Max]; either
// bound may be left out. Bounds are written as the column's type reads them
// (0, 1e6, 2026-01-01).
type AcceptedRange struct {
	Column string  `yaml:"column"`
	Min    *string `yaml:"min,omitempty" json:",omitempty"`
	Max    *string `yaml:"max,omitempty" json:",omitempty"`
}

// Relationship: every non-NULL value of Column exists in To's Field.
type Relationship struct {
	Column string `yaml:"column"`
	To     string `yaml:"to"`
	Field  string `yaml:"field"`
}

// RowCount bounds the rows the load produced.
type RowCount struct {
	Min *int64 `yaml:"min,omitempty" json:",omitempty"`
	Max *int64 `yaml:"max,omitempty" json:",omitempty"`
}

// RowCountChange bounds the change against the rows the load replaces.
type RowCountChange struct {
	// MaxDrop (50%: at least half as many rows) and MaxRise (400%: at most
	// five times as many); either may be left out.
	MaxDrop *Percent `yaml:"max_drop,omitempty" json:",omitempty"`
	MaxRise *Percent `yaml:"max_rise,omitempty" json:",omitempty"`
	// MinBaseline skips the check when the replaced rows were fewer (a new
	// or tiny partition says nothing about the next). Default 100.
	MinBaseline *int64 `yaml:"min_baseline,omitempty" json:",omitempty"`
}

// Percent is a share written 50% (or 0.5).
type Percent float64

// UnmarshalYAML reads 50% or a plain number (0.5).
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	if v, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("line %d: %q is not a percentage; write e.g. 50%%", n.Line, n.Value)
		}
		*p = Percent(f / 100)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a percentage; write e.g. 50%%", n.Line, n.Value)
	}
	*p = Percent(f)
	return nil
}

// MarshalYAML writes the percentage back as 50%.
func (p Percent) MarshalYAML() (any, error) {
	return strconv.FormatFloat(float64(p)*100, 'f', -1, 64) + "%", nil
}

// share is p as a plain share, nil for nil.
func (p *Percent) share() *float64 {
	if p == nil {
		return nil
	}
	f := float64(*p)
	return &f
}

// Check kinds and severities: package checks defines them.
const (
	CheckUnique         = checks.KindUnique
	CheckNotNull        = checks.KindNotNull
	CheckAcceptedValues = checks.KindAcceptedValues
	CheckAcceptedRange  = checks.KindAcceptedRange
	CheckRelationships  = checks.KindRelationships
	CheckRowCount       = checks.KindRowCount
	CheckRowCountChange = checks.KindRowCountChange
	CheckExpression     = checks.KindExpression
	CheckSQL            = checks.KindSQL

	SeverityError = checks.SeverityError
	SeverityWarn  = checks.SeverityWarn

	DefaultMinBaseline = checks.DefaultMinBaseline
)

// Spec is c in the plain form the load runs.
func (c Check) Spec() checks.Spec {
	s := checks.Spec{
		Name: c.Name, Unique: c.Unique, NotNull: c.NotNull,
		AcceptedValues: (*checks.AcceptedValues)(c.AcceptedValues),
		AcceptedRange:  (*checks.AcceptedRange)(c.AcceptedRange),
		Relationships:  (*checks.Relationship)(c.Relationships),
		RowCount:       (*checks.RowCount)(c.RowCount),
		Expression:     c.Expression, SQL: c.SQL, Severity: c.Severity,
		MaxFailing: c.MaxFailing, MaxFailingRatio: c.MaxFailingRatio,
	}
	if r := c.RowCountChange; r != nil {
		s.RowCountChange = &checks.RowCountChange{MaxDrop: r.MaxDrop.share(), MaxRise: r.MaxRise.share(), MinBaseline: r.MinBaseline}
	}
	return s
}

// Specs is cs in the plain form the load runs.
func Specs(cs []Check) []checks.Spec {
	out := make([]checks.Spec, len(cs))
	for i, c := range cs {
		out[i] = c.Spec()
	}
	return out
}

// Kinds lists the kinds set on c (one, when valid).
func (c Check) Kinds() []string { return c.Spec().Kinds() }

// Kind is c's kind ("" unless exactly one is set).
func (c Check) Kind() string { return c.Spec().Kind() }

// DisplayName is Name, or the kind with its columns.
func (c Check) DisplayName() string { return c.Spec().DisplayName() }

// SeverityOrDefault is Severity, error when unset.
func (c Check) SeverityOrDefault() string { return c.Spec().SeverityOrDefault() }

// validateChecks checks a dataset's checks without a database: one kind
// each, names unique, identifiers plain, values present, thresholds sane,
// and the SQL of expression and sql checks a single read that binds only
// @partition and @run_id and reads no clock.
func (c *Config) validateChecks(v *validator, d *Dataset) {
	names := map[string]bool{}
	for i, ch := range d.Checks {
		field := fmt.Sprintf("checks[%d]", i)
		kinds := ch.Kinds()
		switch len(kinds) {
		case 0:
			v.add(field, "names no check; use one of unique, not_null, accepted_values, accepted_range, relationships, row_count, row_count_change, expression, sql")
			continue
		case 1:
		default:
			v.add(field, "sets %s at once; write one check per list item", strings.Join(kinds, " and "))
			continue
		}
		name := ch.DisplayName()
		if names[name] {
			v.add(field, "a second check named %q; give one a name:", name)
		}
		names[name] = true
		switch s := ch.Severity; s {
		case "", SeverityError, SeverityWarn:
		default:
			v.add(field+".severity", "%q; use error (the default: a failure rolls the load back) or warn", s)
		}
		switch {
		case ch.MaxFailing != nil && ch.MaxFailingRatio != nil:
			v.add(field, "sets both max_failing and max_failing_ratio; keep one")
		case ch.MaxFailing != nil && *ch.MaxFailing < 0:
			v.add(field+".max_failing", "%d; use 0 (the default) or more rows", *ch.MaxFailing)
		case ch.MaxFailingRatio != nil && (*ch.MaxFailingRatio < 0 || *ch.MaxFailingRatio >= 1):
			v.add(field+".max_failing_ratio", "%g; use a share from 0 to under 1, e.g. 0.01 for 1%%", *ch.MaxFailingRatio)
		}
		cols := func(f string, cs []string) {
			for _, col := range cs {
				ident(v, f, col)
			}
		}
		switch ch.Kind() {
		case CheckUnique:
			cols(field+".unique", ch.Unique)
		case CheckNotNull:
			cols(field+".not_null", ch.NotNull)
		case CheckAcceptedValues:
			ident(v, field+".accepted_values.column", ch.AcceptedValues.Column)
			if len(ch.AcceptedValues.Values) == 0 {
				v.add(field+".accepted_values.values", "required; list the values the column may hold")
			}
		case CheckAcceptedRange:
			ident(v, field+".accepted_range.column", ch.AcceptedRange.Column)
			if ch.AcceptedRange.Min == nil && ch.AcceptedRange.Max == nil {
				v.add(field+".accepted_range", "sets neither min nor max")
			}
		case CheckRelationships:
			r := ch.Relationships
			ident(v, field+".relationships.column", r.Column)
			qualifiedIdent(v, field+".relationships.to", r.To, "schema.table")
			ident(v, field+".relationships.field", r.Field)
		case CheckRowCount:
			r := ch.RowCount
			switch {
			case r.Min == nil && r.Max == nil:
				v.add(field+".row_count", "sets neither min nor max")
			case r.Min != nil && r.Max != nil && *r.Max < *r.Min:
				v.add(field+".row_count", "max %d is below min %d", *r.Max, *r.Min)
			}
			if ch.MaxFailing != nil || ch.MaxFailingRatio != nil {
				v.add(field, "row_count has no failing rows: its bounds are its threshold; remove max_failing")
			}
		case CheckRowCountChange:
			r := ch.RowCountChange
			if r.MaxDrop == nil && r.MaxRise == nil {
				v.add(field+".row_count_change", "sets neither max_drop nor max_rise")
			}
			if r.MaxDrop != nil && (*r.MaxDrop < 0 || *r.MaxDrop > 1) {
				v.add(field+".row_count_change.max_drop", "%s; use 0%% to 100%%", strconv.FormatFloat(float64(*r.MaxDrop)*100, 'f', -1, 64)+"%")
			}
			if r.MaxRise != nil && *r.MaxRise < 0 {
				v.add(field+".row_count_change.max_rise", "must not be negative")
			}
			if r.MinBaseline != nil && *r.MinBaseline < 0 {
				v.add(field+".row_count_change.min_baseline", "must not be negative")
			}
			if d.Strategy == AppendDedupe && d.PartitionColumn == "" {
				v.add(field, "row_count_change needs partition_column with append_dedupe: the rows a load replaces are the partition's in the view")
			}
			if ch.MaxFailing != nil || ch.MaxFailingRatio != nil {
				v.add(field, "row_count_change has no failing rows: its bounds are its threshold; remove max_failing")
			}
		case CheckExpression:
			checkSQL(v, field+".expression", ch.Expression, false)
		case CheckSQL:
			checkSQL(v, field+".sql", ch.SQL, true)
		}
	}
}

// checkSQL refuses check SQL that is not one read: a second statement, a
// write, DDL, a locking read, a function with side effects, the wall clock,
// or arguments idem does not bind. The plan is checked again against the
// database (EXPLAIN) before the first event.
func checkSQL(v *validator, field, sql string, query bool) {
	if strings.TrimSpace(sql) == "" {
		v.add(field, "is empty")
		return
	}
	for _, f := range sqlcheck.WallClock(sql) {
		v.add(field, "reads the wall clock with %s (byte %d): a check must give the same answer when the partition is loaded again; use @partition", f.Name, f.Offset)
	}
	for _, f := range sqlcheck.NotARead(sql) {
		v.add(field, "%s (byte %d): a check only reads", f.Name, f.Offset)
	}
	if query && !sqlcheck.StartsWithSelect(sql) {
		v.add(field, "must be a SELECT (or WITH ... SELECT) returning the failing rows")
	}
	for _, p := range sqlcheck.Params(sql) {
		if p != "partition" && p != "run_id" {
			v.add(field, "uses @%s, which idem does not bind; idem binds only @partition and @run_id", p)
		}
	}
}
