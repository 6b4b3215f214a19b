package sqlcheck_test

import (
	"fmt"

	"github.com/idem-data/idem/internal/sqlcheck"
)

func ExampleWallClock() {
	sql := `SELECT * FROM staging.orders
WHERE created_at >= now() - interval '1 day' -- not CURRENT_DATE
  AND status <> 'now is the time'
  AND event_date = 'today'::date`
	for _, f := range sqlcheck.WallClock(sql) {
		fmt.Printf("%s at byte %d\n", f.Name, f.Offset)
	}
	// Output:
	// now() at byte 49
	// 'today' at byte 147
}

func ExampleParams() {
	fmt.Println(sqlcheck.Params(`SELECT * FROM staging.events
WHERE event_date = @partition AND tags <@ @tags AND note <> '@run_id'`))
	// Output:
	// [partition tags]
}
