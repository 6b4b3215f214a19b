package pgsource_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/idem-data/idem/sources/pgsource"
)

func ExampleSpec_Validate() {
	spec := pgsource.Spec{
		URL: "postgres://app:hunter2@replica.internal:5432/shop",
		SQL: "SELECT * FROM orders WHERE created_at >= CURRENT_DATE",
	}
	err := spec.Validate()
	fmt.Println(err)
	var se *pgsource.SpecError
	if errors.As(err, &se) {
		fmt.Println(se.Field, se.FatalReason())
	}
	fmt.Println(spec.Addr())
	// Output:
	// pgsource: sql: reads the wall clock with CURRENT_DATE (byte 41), so a rerun or backfill of an old partition would read different rows; use @partition instead
	// sql wall_clock_sql
	// replica.internal:5432/shop
}

func ExampleLagError() {
	var err error = &pgsource.LagError{Source: "replica.internal:5432/shop", Lag: 95 * time.Second, Limit: time.Minute}
	var wait interface {
		NotReady() bool
		RetryAfter() time.Duration
	}
	if errors.As(err, &wait) && wait.NotReady() {
		fmt.Println("hold the message for", wait.RetryAfter())
	}
	fmt.Println(err)
	// Output:
	// hold the message for 35s
	// pgsource: the standby replica.internal:5432/shop lags behind its primary by 1m35s, more than max_replica_lag 1m0s: waiting for its replay
}
