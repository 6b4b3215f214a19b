package files_test

import (
	"fmt"
	"time"

	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
)

func ExampleResolve() {
	day, _ := schemas.ParsePartition(schemas.PartitionDate, "2026-11-28")
	for _, url := range []string{
		"s3://lake/orders/dt={partition}/",
		"s3://lake/orders/{partition:%Y/%m/%d}/",
		"file:///data/orders/year={partition:%Y}/day={partition:%j}/",
	} {
		prefix, err := files.Resolve(files.Spec{URL: url, Format: files.CSV}, day)
		fmt.Println(prefix, err)
	}
	// Output:
	// orders/dt=2026-11-28/ <nil>
	// orders/2026/11/28/ <nil>
	// year=2026/day=332/ <nil>
}

func ExampleSpec_Validate() {
	spec := files.Spec{
		URL:    "s3://lake/orders/dt={partition}",
		Format: "xlsx",
		Ready:  files.ReadyRule{Marker: "_SUCCESS", QuietFor: 10 * time.Minute},
	}
	fmt.Println(spec.Validate())
	// Output:
	// url: "s3://lake/orders/dt={partition}": must end with / (it names a partition's prefix, not a file)
	// format: "xlsx" is not a format; want csv, ndjson or parquet
	// ready: set one of marker, manifest and quiet_for, not several
}
