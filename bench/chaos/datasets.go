package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// dataset is one idem dataset of the campaign with its staging table, the
// physical table idem writes and the relation readers see.
type dataset struct {
	name     string // idem dataset, subject token
	strategy string
	staging  string
	target   string // physical table
	visible  string // what readers query: the table, or append_dedupe's view
	yaml     string // strategy-specific config lines
}

// columns every staging table and every visible relation share.
const columns = "id, event_date, amount, note, version"

var datasets = []dataset{
	{
		name: "replace", strategy: "delete_insert",
		staging: "staging.replace_src", target: "analytics.replace", visible: "analytics.replace",
		yaml: "    partition_column: event_date\n",
	},
	{
		// Natively partitioned: half the partitions have a child of their own
		// (route delete_child: DELETE through the parent, INSERT into the
		// child), the rest land in the default child (route delete).
		name: "replace_part", strategy: "delete_insert",
		staging: "staging.replace_part_src", target: "analytics.replace_part", visible: "analytics.replace_part",
		yaml: "    partition_column: event_date\n",
	},
	{
		name: "upsert", strategy: "merge",
		staging: "staging.upsert_src", target: "analytics.upsert", visible: "analytics.upsert",
		yaml: "    key: [id]\n    version_column: version\n",
	},
	{
		name: "append", strategy: "append_dedupe",
		staging: "staging.append_src", target: "analytics.append_raw", visible: "analytics.append_latest",
		yaml: "    key: [id]\n    view: analytics.append_latest\n    partition_column: event_date\n",
	},
}

// firstDay is partition 0; partition i is firstDay + i days. Empty
// partitions, for fatal inputs, start at emptyDay and are never staged.
var (
	firstDay = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	emptyDay = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
)

func partitionKey(i int) string { return firstDay.AddDate(0, 0, i).Format(time.DateOnly) }

// rowBase is the first id of partition p: ids never collide across
// partitions, so merge's key is global and a row never moves partition.
func rowBase(p int) int64 { return int64(p+1) * 1_000_000 }

const commonSQL = `
CREATE SCHEMA staging;
CREATE SCHEMA analytics;
CREATE TABLE staging.gate_on (ms int);
-- Sleeps once per transaction, uniformly up to staging.gate_on.ms: loads
-- last long enough for faults to catch them between statements.
CREATE FUNCTION staging.gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE ms int;
BEGIN
  IF current_setting('chaos.slept', true) IS DISTINCT FROM 'y' THEN
    PERFORM set_config('chaos.slept', 'y', true);
    SELECT max(g.ms) INTO ms FROM staging.gate_on g;
    IF ms IS NOT NULL AND ms > 0 THEN
      PERFORM pg_sleep(random() * ms / 1000.0);
    END IF;
  END IF;
  RETURN true;
END $$;
`

// createSchema creates staging, targets and the first staging rows of every
// partition. Keys are primary keys in staging, so a retried insert of an
// ambiguous commit cannot duplicate a row, and the reference stays a set.
func createSchema(ctx context.Context, db *pgxpool.Pool, partitions int, slowLoad time.Duration, rng *rand.Rand) error {
	var b strings.Builder
	b.WriteString(commonSQL)
	if slowLoad > 0 {
		fmt.Fprintf(&b, "INSERT INTO staging.gate_on VALUES (%d);\n", slowLoad.Milliseconds())
	}
	for _, d := range datasets {
		fmt.Fprintf(&b, "CREATE TABLE %s (id bigint PRIMARY KEY, event_date date NOT NULL, amount numeric(12,2) NOT NULL, note text, version int NOT NULL);\n", d.staging)
		fmt.Fprintf(&b, "CREATE INDEX ON %s (event_date);\n", d.staging)
	}
	b.WriteString(`
CREATE TABLE analytics.replace (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, version int);
CREATE INDEX ON analytics.replace (event_date);
CREATE TABLE analytics.replace_part (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, version int) PARTITION BY RANGE (event_date);
CREATE TABLE analytics.replace_part_rest PARTITION OF analytics.replace_part DEFAULT;
CREATE TABLE analytics.upsert (id bigint PRIMARY KEY, event_date date, amount numeric(12,2), note text, version int);
CREATE TABLE analytics.append_raw (id bigint, event_date date, amount numeric(12,2), note text, version int, run_id text, load_seq bigint);
`)
	for p := 0; p < partitions; p += 2 {
		day := firstDay.AddDate(0, 0, p)
		fmt.Fprintf(&b, "CREATE TABLE analytics.replace_part_p%03d PARTITION OF analytics.replace_part FOR VALUES FROM ('%s') TO ('%s');\n",
			p, day.Format(time.DateOnly), day.AddDate(0, 0, 1).Format(time.DateOnly))
	}
	if _, err := db.Exec(ctx, b.String()); err != nil {
		return fmt.Errorf("chaos: create schema: %w", err)
	}
	for _, d := range datasets {
		for p := range partitions {
			n := 3 + rng.IntN(18)
			if _, err := db.Exec(ctx, insertRowsSQL(d.staging), rowBase(p), partitionKey(p), n, rng.IntN(1000)); err != nil {
				return fmt.Errorf("chaos: stage %s %s: %w", d.name, partitionKey(p), err)
			}
		}
	}
	return nil
}

// insertRowsSQL inserts $3 rows with ids from $1 into partition $2; $4 salts
// the values. Notes carry quotes and non-ASCII text on purpose.
func insertRowsSQL(table string) string {
	return `INSERT INTO ` + table + ` (` + columns + `)
SELECT $1::bigint + i, $2::date, (($1::bigint + i) * 7 + $4::int) % 1000 + 0.25,
       'row ' || ($1::bigint + i) || ' it''s ünïcode ' || $4::int, 1
  FROM generate_series(0, $3::int - 1) AS i
ON CONFLICT (id) DO NOTHING`
}

// updateRowsSQL changes some rows of partition $1 (ids congruent to $3 mod
// $2): new values and a higher version, never a deletion.
func updateRowsSQL(table string) string {
	return `UPDATE ` + table + ` SET amount = (amount + 1.25) % 100000, note = left(note, 60) || '+', version = version + 1
 WHERE event_date = $1::date AND id % $2::int = $3::int`
}

func sourceSQL(d dataset) string {
	return "SELECT " + columns + " FROM " + d.staging + " WHERE event_date = @partition AND staging.gate()"
}

// unknownDatasetGrace is how long an event for a dataset no replica knows
// (the unknown_dataset fatal input) waits for a config rollout before idem
// dead-letters it: short, so it is dead-lettered within the campaign; idem
// naks it every 2 s meanwhile.
const unknownDatasetGrace = 10 * time.Second

// configYAML is the idem config every replica runs with. Its retry settings
// are the ones retrySchedule measures.
func configYAML(natsURL, pgURL string, o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, `pipeline: chaos
nats:
  url: %s
  ack_wait: %s
  max_in_flight: %d
  unknown_dataset_grace: %s
  replicas: %d
postgres:
  url: %s
http:
  addr: 127.0.0.1:0
datasets:
`, natsURL, o.AckWait, o.MaxInFlight, unknownDatasetGrace, o.streamReplicas(), pgURL)
	for _, d := range datasets {
		fmt.Fprintf(&b, "  %s:\n    strategy: %s\n    target: %s\n%s    source: %s\n", d.name, d.strategy, d.target, d.yaml, sourceSQL(d))
		// No retries line: idem's default (Retries) is what the campaign proves.
		fmt.Fprintf(&b, "    retry_delay: %s\n    max_retry_delay: %s\n    timeout: 20s\n", RetryDelay, MaxRetryDelay)
		b.WriteString(thenYAML(o, d))
	}
	b.WriteString(downstreamYAML(o))
	b.WriteString(sourceYAML(o))
	return b.String()
}
