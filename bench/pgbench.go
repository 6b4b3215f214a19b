package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
)

// pgbench scripts: the floor, and the reference of the small-event target
// (the one-transaction pattern run by pgbench): the audit row started, the
// floor, the audit row updated, in one transaction. :d picks a partition at
// random.
const (
	pgbenchFloor = `\set d random(0, %[1]d)
BEGIN;
DELETE FROM bench.small_t WHERE event_date = date '` + smallBase + `' + :d::int;
INSERT INTO bench.small_t (` + rowCols + `) SELECT ` + rowCols + ` FROM bench.small_src WHERE event_date = date '` + smallBase + `' + :d::int;
COMMIT;
`
	pgbench1tx = `\set d random(0, %[1]d)
BEGIN;
INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt)
  VALUES ('pgbench', 'small', date '` + smallBase + `' + :d::int, (date '` + smallBase + `' + :d::int)::text, 'pgbench-' || :client_id || '-' || :d, 'started', 1) RETURNING id \gset
DELETE FROM bench.small_t WHERE event_date = date '` + smallBase + `' + :d::int;
INSERT INTO bench.small_t (` + rowCols + `) SELECT ` + rowCols + ` FROM bench.small_src WHERE event_date = date '` + smallBase + `' + :d::int;
UPDATE idem.pipeline_audit SET status = 'success', row_count = 10, finished_at = clock_timestamp() WHERE id = :id;
COMMIT;
`
)

var (
	tpsRe = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latRe = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

// runPgbench runs one script with c clients for about n transactions in all
// and returns pgbench's tps and average latency.
func (e *env) runPgbench(ctx context.Context, name string, c, n int) (tps, avgMs float64, err error) {
	script := pgbenchFloor
	if name == MPgbench1tx {
		script = pgbench1tx
	}
	path := filepath.Join(e.work, name+".sql")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(script, e.sizes.Partitions-1)), 0o644); err != nil {
		return 0, 0, err
	}
	perClient := max(1, (n+c-1)/c)
	cmd := exec.CommandContext(ctx, e.pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(c), "-j", strconv.Itoa(c),
		"-t", strconv.Itoa(perClient), "-f", path, e.dbURL)
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("pgbench %s: %w\n%s", name, err, out)
	}
	m := tpsRe.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("pgbench %s: no tps in its output:\n%s", name, out)
	}
	tps, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := latRe.FindSubmatch(out); m != nil {
		avgMs, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	return tps, avgMs, nil
}
