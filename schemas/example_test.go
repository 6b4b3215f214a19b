package schemas_test

import (
	"errors"
	"fmt"

	"github.com/idem-data/idem/schemas"
)

func ExampleDecode() {
	lookup := func(dataset string) (schemas.PartitionType, bool) {
		return schemas.PartitionDate, dataset == "orders"
	}
	body := []byte(`{"dataset": "orders", "partition": "2026-11-28", "run_id": "scheduled__2026-11-28"}`)

	ev, err := schemas.Decode("idem.ready.orders", body, lookup)
	if err != nil {
		fmt.Println(err)
		return
	}
	day, _ := ev.Key.LogicalDate()
	fmt.Println(ev.Dataset, ev.Key.Key, ev.RunID, ev.Force)
	fmt.Println(day.Format("Mon 2 Jan 2006"))
	fmt.Println(ev.MsgID())
	// Output:
	// orders 2026-11-28 scheduled__2026-11-28 false
	// Sat 28 Nov 2026
	// orders:2026-11-28:scheduled__2026-11-28
}

func ExampleDecode_invalid() {
	body := []byte(`{"dataset": "orders", "partition": "2026-02-30", "run_id": "manual__1"}`)

	_, err := schemas.Decode("idem.ready.orders", body, nil)
	fmt.Println(err)

	// The consumer dead-letters by behaviour, without importing this package.
	var fatal interface{ Fatal() bool }
	fmt.Println("fatal:", errors.As(err, &fatal) && fatal.Fatal())
	// Output:
	// invalid event: partition: "2026-02-30" is not a calendar date; want YYYY-MM-DD between 0001-01-01 and 9999-12-31, e.g. 2026-11-28
	// fatal: true
}

func ExampleParsePartition() {
	for _, in := range []string{"2026-11-28T13", "2026-11-28T18:30:00+05:30", "2026-11-28T13:30:00Z"} {
		p, err := schemas.ParsePartition(schemas.PartitionHour, in)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(p.Key)
	}
	// Output:
	// 2026-11-28T13:00:00Z
	// 2026-11-28T13:00:00Z
	// invalid event: partition: "2026-11-28T13:30:00Z" is not an hour: minutes, seconds and fractions must be zero in UTC; want e.g. 2026-11-28T13:00:00Z or 2026-11-28T13
}

func ExamplePartitionReady_Marshal() {
	body, err := schemas.PartitionReady{Dataset: "orders", Partition: "2026-11-28", RunID: "backfill__2026-11-28", Force: true}.Marshal()
	fmt.Println(string(body), err)
	// Output:
	// {"dataset":"orders","partition":"2026-11-28","run_id":"backfill__2026-11-28","force":true} <nil>
}
