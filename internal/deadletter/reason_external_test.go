package deadletter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// invalidEvent is what decoding a body that is not JSON returns.
func invalidEvent(t *testing.T) error {
	_, err := schemas.Decode("idem.ready.orders", []byte("{not json"), func(string) (schemas.PartitionType, bool) { return schemas.PartitionDate, true })
	require.Error(t, err)
	return err
}

// The errors the handler returns give the dead letter its reason: a
// handlers.FatalError by its FatalReason (the header), a check's refusal by
// its text (check_failed), however they are wrapped. This package cannot
// import them, so the contract is checked from outside.
func TestReasonOfHandlerErrors(t *testing.T) {
	pgErr := errors.New(`ERROR: column "note" does not exist (SQLSTATE 42703)`)
	for _, c := range []struct {
		name         string
		err          error
		header, want string
	}{
		{"fatal", handlers.Fatal(handlers.ReasonSchemaMismatch, pgErr), "schema_mismatch", "schema_mismatch"},
		{"fatal in an attempt", &handlers.AttemptError{N: 2, Err: handlers.Fatal(handlers.ReasonInvalidEvent, pgErr)}, "invalid_event", "invalid_event"},
		{"fatal without reason", &handlers.FatalError{Err: pgErr}, "fatal", "fatal"},
		{"check refused", &checks.Error{Failed: []checks.Outcome{{Name: "row_count", Failing: 1, Threshold: "= 0"}}}, "", "check_failed"},
		{"check broken", &checks.Error{Broken: "c", Err: handlers.Fatal(handlers.ReasonSchemaMismatch, pgErr)}, "", "check_failed"},
		{"schema change refused", &handlers.AttemptError{N: 1, Err: &strategies.SchemaChangeError{Err: &strategies.Error{Reason: "schema_mismatch", Msg: "new column note text"}}},
			"schema_mismatch", "schema_mismatch"},
		{"empty source", &strategies.Error{Reason: "empty_source", Msg: "no rows"}, "empty_source", "empty_source"},
		{"invalid event", invalidEvent(t), "invalid_event", "invalid_event"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := deadletter.Envelope{Kind: deadletter.KindFatal, Err: c.err, Subject: "idem.ready.orders", Stream: "IDEM_EVENTS",
				Seq: 7, Dataset: "orders", FailedAt: time.Now()}
			m := e.Msg("idem.dlq.orders")
			require.Equal(t, c.header, m.Header.Get(deadletter.HeaderErrorReason))
			l := deadletter.FromMsg(1, m.Subject, time.Now(), m.Header, m.Data)
			require.Equal(t, c.want, l.Reason, l.Error)
		})
	}
}
