package config_test

import (
	"fmt"

	"github.com/idem-data/idem/internal/config"
)

func Example() {
	yaml := `
pipeline: shop
datasets:
  orders:
    strategy: delete_insert
    target: analytics.fact_orders
    source: SELECT * FROM staging.orders WHERE created_at::date = CURRENT_DATE
    then: [daily_revenue]
  customers:
    strategy: merge
    target: analytics.Dim_Customers
    key: [customer_id]
    version_column: updated_at
    source: SELECT * FROM staging.customers WHERE updated_at::date = @partition
`
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Validate())
	// Output:
	// dataset "customers": target: in "analytics.Dim_Customers": "Dim_Customers" has upper-case letters; Postgres folds unquoted names to lower case, so write "dim_customers"
	// dataset "orders": source: reads the wall clock with CURRENT_DATE (byte 54), so a rerun or backfill of an old partition would load different rows; use @partition instead
	// dataset "orders": source: never uses @partition, so every partition would load the same rows; filter the source with @partition, e.g. WHERE event_date = @partition
	// dataset "orders": partition_column: required for strategy delete_insert; name the target column that holds the partition key
	// dataset "orders": then: "daily_revenue" is not a dataset; declare it under datasets: or fix the name
}

func ExampleParse_unknownKey() {
	_, err := config.Parse([]byte(`
pipeline: shop
datasets:
  orders:
    strategy: delete_insert
    partiton_column: event_date
`), nil)
	fmt.Println(err)
	// Output:
	// config: line 6: datasets.orders.partiton_column: unknown key "partiton_column"; did you mean "partition_column"?
}

func ExampleConfig_Redacted() {
	cfg, _ := config.Parse([]byte(`
pipeline: shop
postgres:
  url: postgres://idem:s3cret@db:5432/warehouse
`), func(name string) string {
		return map[string]string{"IDEM_NATS_TOKEN": "t0ken"}[name]
	})
	fmt.Print(cfg.Redacted())
	// Output:
	// pipeline: shop
	// nats:
	//   url: nats://127.0.0.1:4222
	//   stream: IDEM_EVENTS
	//   dlq_stream: IDEM_DLQ
	//   consumer: idem
	//   subject_prefix: idem.ready
	//   dlq_subject_prefix: idem.dlq
	//   ack_wait: 30s
	//   max_in_flight: 16
	//   backfill_share: 50
	//   max_group: 8
	//   token: REDACTED
	//   results:
	//     stream: IDEM_RESULTS
	//     subject_prefix: idem.result
	//     max_age: 168h0m0s
	//     max_bytes: 1073741824
	// postgres:
	//   url: postgres://idem:REDACTED@db:5432/warehouse
	//   reverify_window: 15m0s
	//   statement_mode: auto
	// http:
	//   addr: 127.0.0.1:9464
	// audit:
	//   retention: 90d
	// datasets: {}
}
