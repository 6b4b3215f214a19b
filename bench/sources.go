package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/localpg"
)

// Sources: one partition loaded by `idem serve` from files (CSV on local
// disk and in S3, NDJSON, Parquet) and from another PostgreSQL, against
// psql doing the same by hand, in one run on the same servers: the
// benchmark's PostgreSQL (the target), a second cluster (the source), an
// S3-compatible server the caller runs (versitygw, in the tests) and the
// in-process NATS server. Then idem's peak RSS while it loads a large
// file of each format.
//
// Every load goes into the same empty table (TRUNCATE and CHECKPOINT
// before each); idem loads it with delete_insert, as a user's dataset
// would, through a stage table (handlers.Staged). The ways take turns,
// each round starting one way further, and the medians are compared.

// SourcesS3 is the S3-compatible server the S3 loads read: its endpoint
// and its root user's keys. A zero SourcesS3 leaves the S3 way out.
type SourcesS3 struct {
	Endpoint, Region, AccessKey, SecretKey string
}

// SourcesResults is what RunSources measured; the JSON file is this
// struct.
type SourcesResults struct {
	Mode     Mode      `json:"mode"`
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	// Rows is the measured partition's, Reps the recorded loads of each
	// way; WarmUp says an unrecorded round of every way ran first.
	Rows   int  `json:"rows"`
	Reps   int  `json:"reps"`
	WarmUp bool `json:"warm_up"`
	// GroupRows are the Parquet files' rows per row group.
	GroupRows int `json:"parquet_group_rows"`
	// Files are the measured partition's file in each format.
	Files map[string]SourcesFile `json:"files"`
	// Loads are each way's recorded loads (keys Src*), in the order run.
	Loads map[string][]SourcesLoad `json:"loads"`
	// Top is pg_stat_statements in the target database over each idem
	// way's last load: where its time went there.
	Top map[string][]ColdStatement `json:"top_statements,omitempty"`
	// Memory is a load of a large file of each format, by a new idem
	// serve each.
	Memory []SourcesMemory `json:"memory"`
	Notes  []string        `json:"notes,omitempty"`
	Load   []LoadSample    `json:"load"`
}

// SourcesFile is one file the benchmark wrote.
type SourcesFile struct {
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
}

// SourcesLoad is one timed load.
type SourcesLoad struct {
	// Ms is idem's publish → ack, or the psql commands' start → exit.
	Ms float64 `json:"ms"`
	// InTxMs is idem's attempt in the audit, started_at → finished_at.
	InTxMs   float64 `json:"in_tx_ms,omitempty"`
	Rows     int64   `json:"rows"`
	WALBytes int64   `json:"wal_bytes"`
	// CPU seconds over the load: the target's cluster, the source's
	// (from another PostgreSQL), and the client: idem serve, or the psql
	// processes.
	PostgresCPU float64 `json:"postgres_cpu_s,omitempty"`
	SourceCPU   float64 `json:"source_cpu_s,omitempty"`
	ClientCPU   float64 `json:"client_cpu_s,omitempty"`
	Run         string  `json:"run,omitempty"`
}

// SourcesMemory is idem serve's resident set around one large load.
type SourcesMemory struct {
	Format string  `json:"format"`
	Bytes  int64   `json:"bytes"`
	Rows   int64   `json:"rows"`
	Ms     float64 `json:"ms"`
	// StartMiB is VmHWM once serve is up, before the event; PeakMiB
	// after the load's ack.
	StartMiB float64 `json:"start_mib"`
	PeakMiB  float64 `json:"peak_mib"`
}

// The ways a partition is loaded, the keys of SourcesResults.Loads.
const (
	SrcCopyCSV     = "psql_copy_csv"   // psql -c "\copy … FROM file CSV HEADER"
	SrcStagedCSV   = "psql_staged_csv" // psql: a temporary table, \copy, DELETE, INSERT … SELECT, one transaction
	SrcPipe        = "psql_pipe"       // psql -c "COPY (…) TO STDOUT" | psql -c "COPY … FROM STDIN"
	SrcIdemCSV     = "idem_csv"        // idem, CSV on local disk
	SrcIdemCSVS3   = "idem_csv_s3"     // idem, the same CSV in S3
	SrcIdemNDJSON  = "idem_ndjson"     // idem, NDJSON on local disk
	SrcIdemParquet = "idem_parquet"    // idem, Parquet on local disk
	SrcIdemPG      = "idem_postgres"   // idem, from the second cluster
)

// sourcesSizes are a mode's sizes.
type sourcesSizes struct {
	rows, reps int
	warmUp     bool
	// bigBytes is the least size of the memory loads' files.
	bigBytes int64
	// groupRows are the Parquet files' rows per row group (pyarrow's
	// default is 1Mi).
	groupRows int
}

func sourcesSizesFor(m Mode) (sourcesSizes, error) {
	switch m {
	case ModeFull:
		return sourcesSizes{rows: 1_000_000, reps: 5, warmUp: true, bigBytes: 1 << 30, groupRows: 1 << 20}, nil
	case ModeQuick:
		return sourcesSizes{rows: 200_000, reps: 2, warmUp: true, bigBytes: 100 << 20, groupRows: 1 << 20}, nil
	case ModeTiny:
		return sourcesSizes{rows: 5_000, reps: 1, bigBytes: 1 << 20, groupRows: 1 << 12}, nil
	}
	return sourcesSizes{}, fmt.Errorf("unknown mode %q (want full, quick or tiny)", m)
}

// Days of the benchmark's partitions.
var (
	srcDay    = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC) // the measured partition
	srcWarm   = srcDay.AddDate(0, 0, -1)                      // 10 rows: each dataset's first load in a process
	srcBigDay = srcDay.AddDate(0, 0, 1)                       // the memory loads
)

const (
	srcTarget = "bench.orders"
	srcTable  = "app.orders" // in the source cluster
	srcBucket = "idembench-sources"
	srcSelect = "SELECT " + srcCols + " FROM " + srcTable + " WHERE event_date = "
)

// sources is one RunSources: env's fields are the target's servers.
type sources struct {
	*env
	sz    sourcesSizes
	out   *SourcesResults
	s3    SourcesS3
	data  string
	psql  string
	srcPG *localpg.Server
	// srcURL is the source cluster's database; srcCPU its postmaster,
	// for its CPU and backends.
	srcURL string
	srcCPU *env
	proc   *idemProc
	seq    int
}

// RunSources runs the sources benchmark at opts.Mode's sizes (full: 1M
// rows, five loads of each way, 1 GiB files; quick: 200k, two, 100 MiB;
// tiny: the smoke test's 20k, one, 4 MiB). It starts the target's cluster
// unless opts.AdminURL names one, always a second cluster for the
// source, and uses the S3 server s3 (zero: no S3 way).
func RunSources(ctx context.Context, opts Options, s3 SourcesS3) (*SourcesResults, error) {
	sz, err := sourcesSizesFor(opts.Mode)
	if err != nil {
		return nil, err
	}
	out := &SourcesResults{Mode: opts.Mode, Command: opts.Command, Started: time.Now().UTC(), Rows: sz.rows, Reps: sz.reps,
		WarmUp: sz.warmUp, GroupRows: sz.groupRows, Files: map[string]SourcesFile{}, Loads: map[string][]SourcesLoad{}, Top: map[string][]ColdStatement{}}
	s := &sources{env: &env{opts: opts, res: &Results{}}, sz: sz, out: out, s3: s3}
	defer s.close()
	s.sampleLoad("start")
	err = s.run(ctx)
	s.sampleLoad("end")
	out.Finished = time.Now().UTC()
	out.Machine, out.Load = s.res.Machine, s.res.Load
	s.noteLoad()
	out.Notes = s.res.Notes
	return out, err
}

func (s *sources) close() {
	if s.srcPG != nil {
		_ = s.srcPG.Close()
	}
	s.env.close()
}

func (s *sources) run(ctx context.Context) error {
	if err := s.start(ctx); err != nil {
		return err
	}
	bin, err := localpg.BinDir()
	if err != nil {
		return err
	}
	s.psql = filepath.Join(bin, "psql")
	s.data = filepath.Join(s.work, "data")
	if err := s.writeFiles(); err != nil {
		return err
	}
	if err := s.startSource(ctx); err != nil {
		return err
	}
	if err := s.upload(ctx); err != nil {
		return err
	}
	if err := s.exec(ctx, "CREATE TABLE "+srcTarget+" "+srcDDL+" WITH (autovacuum_enabled = off)",
		"CREATE INDEX ON "+srcTarget+" (event_date)"); err != nil {
		return err
	}
	s.logf("== sources: %s rows, %d loads of each way", thousands(int64(s.sz.rows)), s.sz.reps)
	if err := s.timed(ctx); err != nil {
		return err
	}
	s.logf("== sources: peak RSS over a file of at least %s MiB of each format", mb(s.sz.bigBytes))
	return s.memory(ctx)
}

// srcPath is where format's file of day is, under root.
func srcPath(root, format string, day time.Time) string {
	return filepath.Join(root, format, "dt="+day.Format(time.DateOnly), "part-00000."+format)
}

// writeFiles writes the measured partition and the warm-up one in every
// format.
func (s *sources) writeFiles() error {
	for _, f := range srcFormats {
		if _, err := writeSrcFile(srcPath(s.data, f, srcWarm), f, srcWarm, 1, 10, 0, s.sz.groupRows); err != nil {
			return err
		}
		w, err := writeSrcFile(srcPath(s.data, f, srcDay), f, srcDay, 1, int64(s.sz.rows), 0, s.sz.groupRows)
		if err != nil {
			return err
		}
		s.out.Files[f] = SourcesFile{Rows: w.Rows, Bytes: w.Bytes}
		s.logf("%s: %s rows, %s MiB", f, thousands(w.Rows), mb(w.Bytes))
	}
	return nil
}

// startSource starts the second cluster and fills its table from the
// CSV files: the measured partition and the warm-up one, index(event_date).
func (s *sources) startSource(ctx context.Context) error {
	s.logf("starting the source's PostgreSQL (durable=%v)", s.opts.Durable)
	var err error
	if s.srcPG, err = startCluster(ctx, s.opts.Durable); err != nil {
		return err
	}
	s.srcURL = s.srcPG.URL("postgres")
	conn, err := pgx.Connect(ctx, s.srcURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA app; CREATE TABLE "+srcTable+" "+srcDDL); err != nil {
		return err
	}
	for _, day := range []time.Time{srcWarm, srcDay} {
		f, err := os.Open(srcPath(s.data, fmtCSV, day))
		if err != nil {
			return err
		}
		_, err = conn.PgConn().CopyFrom(ctx, f, "COPY "+srcTable+" FROM STDIN (FORMAT csv, HEADER true)")
		f.Close()
		if err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, "CREATE INDEX ON "+srcTable+" (event_date)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE "+srcTable); err != nil {
		return err
	}
	var backend int64
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return err
	}
	if pm, err := parentOf(int(backend)); err == nil && pm > 1 {
		s.srcCPU = &env{postmaster: pm}
	}
	return nil
}

// upload puts the CSV files into the S3 server's bucket.
func (s *sources) upload(ctx context.Context) error {
	if s.s3.Endpoint == "" {
		s.res.note("no S3 server: the S3 way was not measured")
		return nil
	}
	region := cmp.Or(s.s3.Region, "us-east-1")
	cl := s3.New(s3.Options{
		Region: region, BaseEndpoint: aws.String(s.s3.Endpoint), UsePathStyle: true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.s3.AccessKey, s.s3.SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(srcBucket)}); err != nil {
		return fmt.Errorf("create bucket %s: %w", srcBucket, err)
	}
	for _, day := range []time.Time{srcWarm, srcDay} {
		path := srcPath(s.data, fmtCSV, day)
		key, err := filepath.Rel(s.data, path)
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srcBucket), Key: aws.String(filepath.ToSlash(key)), Body: f})
		f.Close()
		if err != nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
	}
	s.serveEnv = []string{"AWS_ACCESS_KEY_ID=" + s.s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.s3.SecretKey, "AWS_SESSION_TOKEN=", "AWS_REGION=" + region}
	s.configExtra = fmt.Sprintf("s3:\n  endpoint: %s\n  region: %s\n  path_style: true\n", s.s3.Endpoint, region)
	return nil
}

// srcDataset is a delete_insert dataset into the target with source src
// (written as a YAML flow mapping).
func srcDataset(name string, src map[string]any) dataset {
	b, _ := json.Marshal(src)
	return dataset{Name: name, Strategy: "delete_insert", Target: srcTarget, PartitionColumn: "event_date", Source: string(b)}
}

// filesDataset reads format's files under root, on local disk.
func filesDataset(name, root, format string) dataset {
	return srcDataset(name, map[string]any{"files": map[string]any{"url": "file://" + filepath.Join(root, format) + "/dt={partition}/", "format": format}})
}

// srcWay is one way of loading the partition: through an idem dataset, or
// by psql (its run returns the CPU seconds of its processes).
type srcWay struct {
	key  string
	ds   dataset
	psql func(ctx context.Context) (float64, error)
}

func (s *sources) ways() []srcWay {
	ways := []srcWay{
		{key: SrcCopyCSV, psql: s.copyCSV},
		{key: SrcIdemCSV, ds: filesDataset(SrcIdemCSV, s.data, fmtCSV)},
	}
	if s.s3.Endpoint != "" {
		ways = append(ways, srcWay{key: SrcIdemCSVS3, ds: srcDataset(SrcIdemCSVS3, map[string]any{"files": map[string]any{
			"url": "s3://" + srcBucket + "/" + fmtCSV + "/dt={partition}/", "format": fmtCSV}})})
	}
	return append(ways,
		srcWay{key: SrcStagedCSV, psql: s.stagedCSV},
		srcWay{key: SrcIdemParquet, ds: filesDataset(SrcIdemParquet, s.data, fmtParquet)},
		srcWay{key: SrcIdemNDJSON, ds: filesDataset(SrcIdemNDJSON, s.data, fmtNDJSON)},
		srcWay{key: SrcPipe, psql: s.pipe},
		srcWay{key: SrcIdemPG, ds: srcDataset(SrcIdemPG, map[string]any{"postgres": map[string]any{
			"url": s.srcURL, "sql": srcSelect + "@partition"}})},
	)
}

// timed loads the partition every way, Reps rounds (after an unrecorded
// one in full and quick modes), through one idem serve.
func (s *sources) timed(ctx context.Context) error {
	ways := s.ways()
	var dss []dataset
	for _, w := range ways {
		if w.psql == nil {
			dss = append(dss, w.ds)
		}
	}
	var err error
	if s.proc, err = s.startIdem(ctx, "sources", config.DefaultMaxInFlight, dss); err != nil {
		return err
	}
	// Each dataset's first load in a process prepares it: a 10-row
	// partition, untimed.
	for _, d := range dss {
		if _, err := s.idemLoad(ctx, d.Name, srcWarm, 10); err != nil {
			return fmt.Errorf("warm-up of %s: %w", d.Name, err)
		}
	}
	rounds := s.sz.reps
	if s.sz.warmUp {
		rounds++
	}
	for r := range rounds {
		warm := s.sz.warmUp && r == 0
		label := fmt.Sprintf("round %d", r)
		if warm {
			label = "warm-up round (not recorded)"
		}
		s.logf("sources: %s", label)
		s.sampleLoad("sources " + label)
		for i := range ways {
			w := ways[(i+r)%len(ways)]
			ld, err := s.measure(ctx, w)
			if err != nil {
				return fmt.Errorf("%s: %w", w.key, err)
			}
			s.logf("  %-16s %8s ms (in transaction %s ms), %s MB of WAL", w.key, num(ld.Ms), num(ld.InTxMs), mb(ld.WALBytes))
			if !warm {
				s.out.Loads[w.key] = append(s.out.Loads[w.key], ld)
			}
		}
	}
	return s.proc.stop()
}

// measure empties the target, checkpoints, and loads the partition one
// way, with its WAL and CPU; it checks the target then holds the rows.
func (s *sources) measure(ctx context.Context, w srcWay) (SourcesLoad, error) {
	if err := s.exec(ctx, "TRUNCATE "+srcTarget, "CHECKPOINT"); err != nil {
		return SourcesLoad{}, err
	}
	idem := w.psql == nil
	if idem && s.stats {
		if err := s.exec(ctx, "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)"); err != nil {
			return SourcesLoad{}, err
		}
	}
	var lsn string
	if err := s.pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return SourcesLoad{}, err
	}
	var srcBefore map[int]bool
	if s.srcCPU != nil {
		srcBefore = s.srcCPU.backends()
	}
	before := s.backends()
	pg0, _ := s.cpuNow(0)
	src0 := s.sourceCPU()
	var ld SourcesLoad
	var err error
	if idem {
		ld, err = s.idemLoad(ctx, w.ds.Name, srcDay, s.sz.rows)
	} else {
		start := time.Now()
		ld.ClientCPU, err = w.psql(ctx)
		ld.Ms = ms(time.Since(start))
	}
	if err != nil {
		return ld, err
	}
	s.reaped(before)
	if s.srcCPU != nil {
		s.srcCPU.reaped(srcBefore)
	}
	if pg1, ok := s.cpuNow(0); ok && pg0.postgres > 0 {
		ld.PostgresCPU = pg1.postgres - pg0.postgres
	}
	if src0 > 0 {
		ld.SourceCPU = s.sourceCPU() - src0
	}
	if err := s.pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint", lsn).Scan(&ld.WALBytes); err != nil {
		return ld, err
	}
	if idem && s.stats {
		// Before the harness's own count below.
		var err error
		if s.out.Top[w.key], err = (&cold{env: s.env}).topStatements(ctx); err != nil {
			return ld, err
		}
	}
	n, err := s.int64(ctx, "SELECT count(*) FROM "+srcTarget)
	if err != nil {
		return ld, err
	}
	if n != int64(s.sz.rows) {
		return ld, fmt.Errorf("the target holds %d rows after the load, want %d", n, s.sz.rows)
	}
	if !idem {
		ld.Rows = n
	}
	return ld, nil
}

// sourceCPU is the source cluster's CPU seconds so far (0: not measured).
func (s *sources) sourceCPU() float64 {
	if s.srcCPU == nil {
		return 0
	}
	t, err := clusterCPU(s.srcCPU.postmaster)
	if err != nil {
		return 0
	}
	return t
}

// idemLoad publishes the partition of day to dataset ds and waits for
// idem's ack, which follows the load's commit; the attempt must have
// succeeded with want rows.
func (s *sources) idemLoad(ctx context.Context, ds string, day time.Time, want int) (SourcesLoad, error) {
	return s.idemLoadOn(ctx, s.proc, ds, day, want, 30*time.Minute)
}

func (s *sources) idemLoadOn(ctx context.Context, p *idemProc, ds string, day time.Time, want int, within time.Duration) (SourcesLoad, error) {
	s.seq++
	run := fmt.Sprintf("sources-%s-%d", ds, s.seq)
	m, err := s.msg(event{ds, day.Format(time.DateOnly), run})
	if err != nil {
		return SourcesLoad{}, err
	}
	cpu0, _ := procTicks(p.cmd.Process.Pid, false)
	start := time.Now()
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		return SourcesLoad{}, err
	}
	acked, err := p.acks.wait(ctx, []uint64{ack.Sequence}, within)
	if err != nil {
		return SourcesLoad{}, fmt.Errorf("load %s: %w\n%s", run, err, p.tail())
	}
	ld := SourcesLoad{Run: run, Ms: ms(acked[0].Sub(start))}
	if cpu1, err := procTicks(p.cmd.Process.Pid, false); err == nil && cpu0 > 0 {
		ld.ClientCPU = cpu1 - cpu0
	}
	var status string
	var msg *string
	var rows *int64
	err = s.pool.QueryRow(ctx, `SELECT status, error, row_count, extract(epoch FROM finished_at - started_at)::float8 * 1000
		FROM idem.pipeline_audit WHERE run_id = $1 ORDER BY id DESC LIMIT 1`, run).Scan(&status, &msg, &rows, &ld.InTxMs)
	if err != nil {
		return ld, err
	}
	if status != "success" {
		return ld, fmt.Errorf("idem load %s: %s: %s", run, status, deref(msg))
	}
	if rows != nil {
		ld.Rows = *rows
	}
	if want > 0 && ld.Rows != int64(want) {
		return ld, fmt.Errorf("idem load %s: %d rows, want %d", run, ld.Rows, want)
	}
	return ld, nil
}

// runPsql runs psql with args on url and returns its CPU seconds.
func (s *sources) runPsql(ctx context.Context, url string, args ...string) (float64, error) {
	cmd := exec.CommandContext(ctx, s.psql, append([]string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url}, args...)...)
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("psql %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return cpuOf(cmd), nil
}

func cpuOf(cmd *exec.Cmd) float64 {
	if cmd.ProcessState == nil {
		return 0
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

// copyCSV is the reference of the file loads:
// psql -c "\copy target FROM file CSV HEADER".
func (s *sources) copyCSV(ctx context.Context) (float64, error) {
	return s.runPsql(ctx, s.dbURL, "-c", `\copy `+srcTarget+` FROM '`+srcPath(s.data, fmtCSV, srcDay)+`' CSV HEADER`)
}

// stagedCSV is idem's delete_insert from a file done by hand in psql: the
// rows copied into a temporary table, then the partition deleted and
// inserted from it, in one transaction.
func (s *sources) stagedCSV(ctx context.Context) (float64, error) {
	script := filepath.Join(s.work, "staged.sql")
	sql := "BEGIN;\n" +
		"CREATE TEMPORARY TABLE stage (LIKE " + srcTarget + ") ON COMMIT DROP;\n" +
		`\copy stage FROM '` + srcPath(s.data, fmtCSV, srcDay) + "' CSV HEADER\n" +
		"DELETE FROM " + srcTarget + " WHERE event_date = '" + srcDay.Format(time.DateOnly) + "';\n" +
		"INSERT INTO " + srcTarget + " SELECT * FROM stage;\n" +
		"COMMIT;\n"
	if err := os.WriteFile(script, []byte(sql), 0o644); err != nil {
		return 0, err
	}
	return s.runPsql(ctx, s.dbURL, "-f", script)
}

// pipe is the reference of the load from another PostgreSQL:
// psql -c "COPY (…) TO STDOUT" | psql -c "COPY … FROM STDIN", the two
// processes joined by a pipe as a shell joins them.
func (s *sources) pipe(ctx context.Context) (float64, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	base := []string{"-X", "-q", "-v", "ON_ERROR_STOP=1"}
	from := exec.CommandContext(ctx, s.psql, append(base, "-d", s.srcURL, "-c",
		"COPY ("+srcSelect+"'"+srcDay.Format(time.DateOnly)+"') TO STDOUT")...)
	to := exec.CommandContext(ctx, s.psql, append(base, "-d", s.dbURL, "-c", "COPY "+srcTarget+" FROM STDIN")...)
	var fromErr, toErr strings.Builder
	from.Env, to.Env = childEnv(), childEnv()
	from.Stdout, from.Stderr = w, &fromErr
	to.Stdin, to.Stdout, to.Stderr = r, &toErr, &toErr
	if err := to.Start(); err != nil {
		r.Close()
		w.Close()
		return 0, err
	}
	err = from.Start()
	// The children hold the pipe's ends now.
	r.Close()
	w.Close()
	if err != nil {
		_ = to.Wait()
		return 0, err
	}
	ferr, terr := from.Wait(), to.Wait()
	if ferr != nil || terr != nil {
		return 0, fmt.Errorf("psql | psql: %v, %v\n%s%s", ferr, terr, fromErr.String(), toErr.String())
	}
	return cpuOf(from) + cpuOf(to), nil
}

// memory loads a file of at least bigBytes of each format, each through
// a new idem serve, and reads its peak resident set (VmHWM) after the
// ack; each file is removed once loaded.
func (s *sources) memory(ctx context.Context) error {
	root := filepath.Join(s.work, "big")
	defer os.RemoveAll(root)
	for _, f := range srcFormats {
		s.sampleLoad("memory " + f)
		path := srcPath(root, f, srcBigDay)
		w, err := writeSrcFile(path, f, srcBigDay, 1, 0, s.sz.bigBytes, s.sz.groupRows)
		if err != nil {
			return err
		}
		s.logf("memory %s: %s rows, %s MiB", f, thousands(w.Rows), mb(w.Bytes))
		m, err := s.memoryLoad(ctx, root, f, w)
		if err != nil {
			return fmt.Errorf("memory %s: %w", f, err)
		}
		s.logf("memory %s: loaded in %s ms, VmHWM %s MiB at start, %s MiB after", f, num(m.Ms), num(m.StartMiB), num(m.PeakMiB))
		s.out.Memory = append(s.out.Memory, m)
		if err := os.RemoveAll(filepath.Dir(path)); err != nil {
			return err
		}
		if err := s.exec(ctx, "TRUNCATE "+srcTarget); err != nil {
			return err
		}
	}
	return nil
}

func (s *sources) memoryLoad(ctx context.Context, root, format string, w srcFile) (SourcesMemory, error) {
	if err := s.exec(ctx, "TRUNCATE "+srcTarget, "CHECKPOINT"); err != nil {
		return SourcesMemory{}, err
	}
	name := "rss_" + format
	p, err := s.startIdem(ctx, "sources-"+name, config.DefaultMaxInFlight, []dataset{filesDataset(name, root, format)})
	if err != nil {
		return SourcesMemory{}, err
	}
	defer p.kill()
	m := SourcesMemory{Format: format, Bytes: w.Bytes, Rows: w.Rows, StartMiB: p.peakMiB()}
	ld, err := s.idemLoadOn(ctx, p, name, srcBigDay, int(w.Rows), 2*time.Hour)
	if err != nil {
		return m, err
	}
	m.Ms, m.PeakMiB = ld.Ms, p.peakMiB()
	return m, p.stop()
}

// noteLoad says, in the results, when the machine was not the run's alone.
func (s *sources) noteLoad() {
	var peak float64
	for _, l := range s.out.Load {
		peak = max(peak, l.Load1)
	}
	if len(s.out.Load) > 0 && s.out.Load[0].Load1 >= 0.5 {
		s.res.note("the machine was shared: load average %.2f at the start and up to %.2f during the run, on %d vCPUs", s.out.Load[0].Load1, peak, s.out.Machine.CPUs)
	}
}
