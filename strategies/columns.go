package strategies

// Column is a column of a load's target: its name and its type as
// PostgreSQL writes it (format_type, e.g. "numeric(12,2)"), the form
// SchemaChange's types take.
type Column struct {
	Name, Type string
}

// TargetColumns returns the target's columns as the load pl describes
// left them, in the table's order: read in the load's transaction, and
// read again after a column its on_schema_change added or widened, so once
// that transaction commits they are the columns it committed. Nil until the
// load resolved its plan, or when the target does not exist.
func (pl *Plan) TargetColumns() []Column {
	if pl == nil || pl.target == nil || pl.missing || len(pl.target.Columns) == 0 {
		return nil
	}
	out := make([]Column, 0, len(pl.target.Columns))
	for _, c := range pl.target.Columns {
		out = append(out, Column{Name: c.Name, Type: c.Type})
	}
	return out
}
