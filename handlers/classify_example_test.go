package handlers_test

import (
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/handlers"
)

// A load that hits a renamed column fails the same way on every attempt: it is
// fatal and its message goes to the dead-letter stream after one delivery. A
// deadlock or a server crash is transient and comes back unchanged, to retry.
func ExampleClassify() {
	for _, err := range []error{
		fmt.Errorf("load orders: %w", &pgconn.PgError{
			Severity: "ERROR", Code: "42703", Message: `column "amount" does not exist`,
		}),
		&pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"},
		io.ErrUnexpectedEOF,
	} {
		err = handlers.Classify(err)
		fmt.Printf("fatal=%t sqlstate=%q %v\n", handlers.IsFatal(err), handlers.SQLState(err), err)
	}
	// Output:
	// fatal=true sqlstate="42703" undefined_object: load orders: ERROR: column "amount" does not exist (SQLSTATE 42703)
	// fatal=false sqlstate="40P01" ERROR: deadlock detected (SQLSTATE 40P01)
	// fatal=false sqlstate="" unexpected EOF
}

// Errors found before any SQL runs are marked fatal where they are found, with
// a reason that names the cause.
func ExampleFatal() {
	err := handlers.Fatal(handlers.ReasonEmptySource,
		errors.New("orders 2026-11-28: source returned no rows and allow_empty is false"))
	fmt.Println(err)

	var fatal *handlers.FatalError
	if errors.As(err, &fatal) {
		fmt.Println("reason:", fatal.Reason)
	}
	fmt.Println(handlers.Fatal(handlers.ReasonConfig, nil) == nil)
	// Output:
	// empty_source: orders 2026-11-28: source returned no rows and allow_empty is false
	// reason: empty_source
	// true
}

// IsFatal sees through any wrapping, so the consumer can decide a message's fate
// from whatever error the handler returns. It never needs this package: the
// check is errors.As on an interface{ Fatal() bool }.
func ExampleIsFatal() {
	fatal := handlers.Fatal(handlers.ReasonInvalidEvent, errors.New(`"partition" is required`))
	wrapped := fmt.Errorf("handle seq 42: %w", errors.Join(fatal, errors.New("audit: conn closed")))

	var f interface{ Fatal() bool }
	fmt.Println(handlers.IsFatal(wrapped), errors.As(wrapped, &f) && f.Fatal())
	fmt.Println(handlers.IsFatal(errors.New("nats: timeout")))
	// Output:
	// true true
	// false
}
