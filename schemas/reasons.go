package schemas

// Reasons are short, stable machine words that name why a load can never
// succeed: a fatal error's text starts with one ("<reason>: ..."), and dead
// letters, audit rows and metric labels carry it, so none changes once
// shipped. They are defined here, once, for everything that fails an event:
// this package's decoder, the strategies, the checks and the handlers
// (which re-export them as handlers.Reason*).
const (
	ReasonInvalidEvent        = "invalid_event"        // the event fails decoding or validation
	ReasonUnknownDataset      = "unknown_dataset"      // no dataset of that name is configured
	ReasonEmptySource         = "empty_source"         // the source returned no rows and allow_empty is false
	ReasonWallClockSQL        = "wall_clock_sql"       // the source SQL reads the clock
	ReasonConfig              = "config"               // connection string, TLS, database name, server setting
	ReasonPermissionDenied    = "permission_denied"    // grants or authentication
	ReasonUndefinedObject     = "undefined_object"     // a table, column, function, type or schema is missing
	ReasonSchemaMismatch      = "schema_mismatch"      // the objects exist but do not fit the statement
	ReasonInvalidSQL          = "invalid_sql"          // the SQL text itself is wrong, whatever the tables
	ReasonDataException       = "data_exception"       // a value is invalid for its type, or a RAISE
	ReasonConstraintViolation = "constraint_violation" // NOT NULL, unique, foreign key, check, exclusion
	ReasonDataCorrupted       = "data_corrupted"       // the server found corrupted data or indexes
	ReasonCheckFailed         = "check_failed"         // the dataset's checks refused the rows a load produced
	ReasonFatal               = "fatal"                // a fatal error that names no cause
)
