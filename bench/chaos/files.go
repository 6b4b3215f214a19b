package chaos

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parquet-go/parquet-go"
)

// The file datasets (Options.Files): one per format idem reads, in a real
// versitygw that idem reaches through the error proxy and a Toxiproxy link
// (faults_objstore.go). No event of theirs is published by the harness:
// each dataset has a watch, so idem lists the newest partitions itself and
// publishes an event for each new or changed one. Some partitions land
// during the fault phase, and files of landed partitions are rewritten
// (corrections: rows updated with a higher version, rows added, and for
// delete_insert rows removed), so the watches must see changes and reload.
// At the end every partition's target rows must equal its files, row for
// row, and no file version may have been loaded twice.

// fileDataset is one dataset whose source is files.
type fileDataset struct {
	name     string
	format   string // csv, ndjson, parquet: idem's name
	ext      string
	strategy string
	target   string
	yaml     string // strategy-specific config lines
	removes  bool   // corrections may remove rows (not under merge, which never deletes)
}

var fileDatasets = []fileDataset{
	{name: "files_csv", format: "csv", ext: "csv", strategy: "delete_insert", target: "analytics.files_csv",
		yaml: "    partition_column: event_date\n", removes: true},
	{name: "files_ndjson", format: "ndjson", ext: "ndjson", strategy: "merge", target: "analytics.files_ndjson",
		yaml: "    key: [id]\n    version_column: version\n"},
	{name: "files_parquet", format: "parquet", ext: "parquet", strategy: "delete_insert", target: "analytics.files_parquet",
		yaml: "    partition_column: event_date\n", removes: true},
}

const (
	fileBucket = "landing"
	// filePartitions per file dataset: the newest UTC days, today included.
	filePartitions = 5
	// fileWatchLast is what each watch lists: more days than the
	// partitions, so that a campaign crossing midnight still lists them all.
	fileWatchLast  = filePartitions + 2
	fileWatchEvery = 5 * time.Second
	// fileMarker makes a partition complete; it is written after the files.
	fileMarker = "_SUCCESS"
)

// isFileDataset says whether name is a file dataset.
func isFileDataset(name string) bool {
	return slices.ContainsFunc(fileDatasets, func(d fileDataset) bool { return d.name == name })
}

// isFileSubject says whether an event's subject, or its dead letter's, is
// a file dataset's: its last token names the dataset.
func isFileSubject(subject string) bool {
	return isFileDataset(subject[strings.LastIndexByte(subject, '.')+1:])
}

// fileRow is one row of a file, as the target must hold it.
type fileRow struct {
	id      int64
	cents   int64
	note    string
	version int
}

// filePart is one partition of a file dataset: its files' rows as last
// written (the reference), and when it lands.
type filePart struct {
	ds     *fileDataset
	idx    int
	key    string // the date, the partition key
	landAt time.Duration
	files  [][]fileRow // rows of part-000, part-001, ...
	nextID int64
	landed bool
}

func (p *filePart) prefix() string { return p.ds.name + "/dt=" + p.key + "/" }

func (p *filePart) fileKey(i int) string {
	return fmt.Sprintf("%spart-%03d.%s", p.prefix(), i, p.ds.ext)
}

// fileStep is one write of the workload: a partition landing, or one of
// its files rewritten.
type fileStep struct {
	at   time.Duration
	part *filePart
	file int // the file a correction rewrites; -1 for a landing
}

// FileFigures are the file datasets' figures.
type FileFigures struct {
	Datasets    []string `json:"datasets"`
	Partitions  int      `json:"partitions"`
	Landed      int      `json:"partitions_landed_during_phase"`
	Corrections int      `json:"corrections"`
	Puts        int      `json:"puts"`
	PutRetries  int      `json:"put_retries"` // the harness's writes that failed (store down) and were retried
	// What idem did: successful loads of file partitions, attempts that
	// failed, and the watch's runs.
	Loads          int `json:"loads"`
	FailedAttempts int `json:"failed_attempts"`
	// Superseded counts watch runs skipped because a later event had
	// already loaded the files they would read.
	Superseded int `json:"superseded_runs"`
	// What the error proxy did over the whole campaign.
	ProxyRequests int64 `json:"proxy_requests"`
	ProxyErrors   int64 `json:"proxy_errors"`
	ProxyCuts     int64 `json:"proxy_bodies_cut"`
	// CaughtUpSeconds is how long after the last fault every partition's
	// target rows equalled its files.
	CaughtUpSeconds float64 `json:"caught_up_seconds"`
	CaughtUp        bool    `json:"caught_up"`
	// The check.
	LostRows        int `json:"lost_rows"`
	StaleRows       int `json:"stale_rows"`
	UnexpectedRows  int `json:"unexpected_rows"`
	DoubledRows     int `json:"doubled_rows"`
	VersionTwice    int `json:"file_versions_loaded_twice"`
	LoadsNoFiles    int `json:"loads_without_files"`
	RunsTwice       int `json:"runs_loaded_twice"`
	DeadLetters     int `json:"dead_letters"`
	ForeignRuns     int `json:"runs_not_from_a_watch"`
	PartitionsEqual int `json:"partitions_equal_to_files"`
}

// fileWorkload is the file datasets' part of a campaign. Its methods do
// nothing on a nil receiver, so the campaign calls them unconditionally.
type fileWorkload struct {
	o      Options
	store  *objStore
	client *s3.Client // versitygw's own port: the harness's writes see no fault
	parts  []*filePart
	steps  []fileStep
	logf   func(string, ...any)

	touches chan struct{} // a fault asks for a correction now

	mu       sync.Mutex
	puts     int
	retries  int
	landed   int
	corrects int
	done     chan struct{}
}

// setupFiles starts the object store, creates the bucket and the targets,
// draws the workload and writes the partitions that are there from the
// start.
func setupFiles(ctx context.Context, o Options, db *pgxpool.Pool, logs string) (*fileWorkload, error) {
	if !o.Files {
		return nil, nil
	}
	store, err := startObjStore(ctx, o.S3Bin, filepath.Join(o.Dir, "s3"), logs, o.Seed)
	if err != nil {
		return nil, err
	}
	w := &fileWorkload{o: o, store: store, logf: o.Logf, touches: make(chan struct{}, 1)}
	store.touch = func() {
		select {
		case w.touches <- struct{}{}:
		default:
		}
	}
	w.client = s3.New(s3.Options{
		Region:                     "us-east-1",
		BaseEndpoint:               aws.String(store.direct()),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(store.accessKey, store.secretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	if _, err := w.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(fileBucket)}); err != nil {
		w.close()
		return nil, fmt.Errorf("chaos: create bucket: %w", err)
	}
	var b strings.Builder
	for _, d := range fileDatasets {
		fmt.Fprintf(&b, "CREATE TABLE %s (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, version int);\n", d.target)
		if d.strategy == "merge" {
			fmt.Fprintf(&b, "ALTER TABLE %s ADD PRIMARY KEY (id);\n", d.target)
		}
	}
	if _, err := db.Exec(ctx, b.String()); err != nil {
		w.close()
		return nil, fmt.Errorf("chaos: create file targets: %w", err)
	}
	w.plan(rand.New(rand.NewPCG(uint64(o.Seed), 4)), time.Now())
	for _, p := range w.parts {
		if p.landAt == 0 {
			if err := w.land(ctx, p); err != nil {
				w.close()
				return nil, err
			}
		}
	}
	return w, nil
}

// plan draws the partitions (the newest UTC days at now), their rows,
// when each lands, and the corrections of the phase.
func (w *fileWorkload) plan(rng *rand.Rand, now time.Time) {
	today := now.UTC().Truncate(24 * time.Hour)
	for di := range fileDatasets {
		d := &fileDatasets[di]
		for i := range filePartitions {
			p := &filePart{ds: d, idx: i, key: today.AddDate(0, 0, i-filePartitions+1).Format(time.DateOnly)}
			p.nextID = int64(i+1) * 1_000_000
			for range 1 + rng.IntN(2) {
				var rows []fileRow
				for range 10 + rng.IntN(50) {
					rows = append(rows, w.newRow(p, rng))
				}
				p.files = append(p.files, rows)
			}
			// Most partitions are there from the start; the others land
			// in the first half of the phase.
			if rng.IntN(3) == 0 {
				p.landAt = w.o.Duration/10 + time.Duration(rng.Int64N(int64(w.o.Duration*2/5)))
				w.steps = append(w.steps, fileStep{at: p.landAt, part: p, file: -1})
			}
			w.parts = append(w.parts, p)
		}
	}
	// About one correction every 1.5 s, over the phase, each after its
	// partition landed.
	n := int(w.o.Duration / (1500 * time.Millisecond))
	for k := range n {
		at := w.o.Duration * time.Duration(k+1) / time.Duration(n+1)
		p := w.parts[rng.IntN(len(w.parts))]
		if p.landAt >= at {
			continue
		}
		w.steps = append(w.steps, fileStep{at: at, part: p, file: rng.IntN(len(p.files))})
	}
	sort.SliceStable(w.steps, func(a, b int) bool { return w.steps[a].at < w.steps[b].at })
}

func (w *fileWorkload) newRow(p *filePart, rng *rand.Rand) fileRow {
	id := p.nextID
	p.nextID++
	return fileRow{id: id, cents: rng.Int64N(10_000_000), version: 1,
		note: fmt.Sprintf(`row %d, it's "ünïcode" \ %d`, id, rng.IntN(1000))}
}

// correct changes the rows of one file: some updated with a higher
// version, some added, for a dataset that deletes one perhaps removed.
// Every correction changes at least one row, so no two versions of a file
// have the same content (nor the same ETag).
func (w *fileWorkload) correct(p *filePart, file int, rng *rand.Rand) {
	rows := p.files[file]
	if p.ds.removes && len(rows) > 2 && rng.IntN(3) == 0 {
		i := rng.IntN(len(rows))
		rows = slices.Delete(slices.Clone(rows), i, i+1)
	} else {
		rows = slices.Clone(rows)
	}
	changed := false
	for i := range rows {
		if rng.IntN(4) == 0 || (!changed && i == len(rows)-1) {
			rows[i].version++
			rows[i].cents = rng.Int64N(10_000_000)
			rows[i].note += "+"
			changed = true
		}
	}
	for range rng.IntN(3) {
		rows = append(rows, w.newRow(p, rng))
	}
	p.files[file] = rows
}

// run carries out the steps in real time from start, in a goroutine; wait
// waits for it.
func (w *fileWorkload) run(ctx context.Context, start time.Time) {
	if w == nil {
		return
	}
	w.done = make(chan struct{})
	rng := rand.New(rand.NewPCG(uint64(w.o.Seed), 5))
	go func() {
		defer close(w.done)
		end := start.Add(w.o.Duration)
		for i := 0; i < len(w.steps) || time.Now().Before(end); {
			// The next planned step, or the phase's end once none is left.
			next := end
			if i < len(w.steps) {
				next = start.Add(w.steps[i].at)
			}
			t := time.NewTimer(time.Until(next))
			var s fileStep
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-w.touches:
				// A fault of the store starts: a correction of a landed
				// partition now, so that its loads read through the fault.
				t.Stop()
				p := w.landedPart(rng)
				if p == nil || !time.Now().Before(end) {
					continue
				}
				s = fileStep{at: time.Since(start), part: p, file: rng.IntN(len(p.files))}
			case <-t.C:
				if i == len(w.steps) {
					return
				}
				s = w.steps[i]
				i++
			}
			var err error
			if s.file < 0 {
				err = w.land(ctx, s.part)
				w.mu.Lock()
				w.landed++
				w.mu.Unlock()
			} else {
				w.correct(s.part, s.file, rng)
				err = w.put(ctx, s.part.fileKey(s.file), encodeFile(s.part, s.file))
				w.mu.Lock()
				w.corrects++
				w.mu.Unlock()
			}
			if err != nil {
				w.logf("chaos: files: %v", err)
				return
			}
		}
	}()
}

// landedPart draws a partition that has landed; nil if none has.
func (w *fileWorkload) landedPart(rng *rand.Rand) *filePart {
	var landed []*filePart
	for _, p := range w.parts {
		if p.landed {
			landed = append(landed, p)
		}
	}
	if len(landed) == 0 {
		return nil
	}
	return landed[rng.IntN(len(landed))]
}

func (w *fileWorkload) wait() {
	if w != nil && w.done != nil {
		<-w.done
	}
}

// land writes a partition's files, then its marker.
func (w *fileWorkload) land(ctx context.Context, p *filePart) error {
	for i := range p.files {
		if err := w.put(ctx, p.fileKey(i), encodeFile(p, i)); err != nil {
			return err
		}
	}
	if err := w.put(ctx, p.prefix()+fileMarker, nil); err != nil {
		return err
	}
	p.landed = true
	return nil
}

// put writes body at key, retrying until it succeeds: the content is the
// same every time, so a write whose answer was lost is harmless, and the
// reference is what the store ends up holding.
func (w *fileWorkload) put(ctx context.Context, key string, body []byte) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := w.client.PutObject(pctx, &s3.PutObjectInput{Bucket: aws.String(fileBucket), Key: aws.String(key), Body: bytes.NewReader(body)})
		cancel()
		if err == nil {
			w.mu.Lock()
			w.puts++
			w.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
		w.mu.Lock()
		w.retries++
		w.mu.Unlock()
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// encodeFile renders file i of p in its dataset's format, every column
// written (the partition column too).
func encodeFile(p *filePart, i int) []byte {
	rows := p.files[i]
	var buf bytes.Buffer
	amount := func(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }
	switch p.ds.format {
	case "csv":
		cw := csv.NewWriter(&buf)
		_ = cw.Write([]string{"id", "event_date", "amount", "note", "version"})
		for _, r := range rows {
			_ = cw.Write([]string{strconv.FormatInt(r.id, 10), p.key, amount(r.cents), r.note, strconv.Itoa(r.version)})
		}
		cw.Flush()
	case "ndjson":
		enc := json.NewEncoder(&buf)
		for _, r := range rows {
			_ = enc.Encode(struct {
				ID        int64       `json:"id"`
				EventDate string      `json:"event_date"`
				Amount    json.Number `json:"amount"`
				Note      string      `json:"note"`
				Version   int         `json:"version"`
			}{r.id, p.key, json.Number(amount(r.cents)), r.note, r.version})
		}
	case "parquet":
		day, _ := time.Parse(time.DateOnly, p.key)
		out := make([]parquetRow, len(rows))
		for k, r := range rows {
			out[k] = parquetRow{ID: r.id, EventDate: int32(day.Unix() / 86400), Amount: r.cents, Note: r.note, Version: int32(r.version)}
		}
		pw := parquet.NewGenericWriter[parquetRow](&buf, parquet.MaxRowsPerRowGroup(16))
		if _, err := pw.Write(out); err != nil {
			panic(err)
		}
		if err := pw.Close(); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
}

// parquetRow is a row of a Parquet file: amount as a decimal of scale 2.
type parquetRow struct {
	ID        int64  `parquet:"id"`
	EventDate int32  `parquet:"event_date,date"`
	Amount    int64  `parquet:"amount,decimal(2:12)"`
	Note      string `parquet:"note"`
	Version   int32  `parquet:"version"`
}

// yaml is the config of the file datasets and of the store, appended to
// the campaign's.
func (w *fileWorkload) yaml() string {
	if w == nil {
		return ""
	}
	var b strings.Builder
	for _, d := range fileDatasets {
		fmt.Fprintf(&b, "  %s:\n    strategy: %s\n    target: %s\n%s", d.name, d.strategy, d.target, d.yaml)
		fmt.Fprintf(&b, "    source:\n      files: {url: \"s3://%s/%s/dt={partition}/\", format: %s, ready: {marker: %s}}\n",
			fileBucket, d.name, d.format, fileMarker)
		fmt.Fprintf(&b, "    watch: {every: %s, last: %d}\n", fileWatchEvery, fileWatchLast)
		fmt.Fprintf(&b, "    retry_delay: %s\n    max_retry_delay: %s\n    timeout: 20s\n", RetryDelay, MaxRetryDelay)
	}
	fmt.Fprintf(&b, "s3:\n  endpoint: %s\n  path_style: true\n", w.store.endpoint())
	return b.String()
}

// env is what idem needs to reach the store.
func (w *fileWorkload) env() []string {
	if w == nil {
		return nil
	}
	return []string{"AWS_ACCESS_KEY_ID=" + w.store.accessKey, "AWS_SECRET_ACCESS_KEY=" + w.store.secretKey, "AWS_REGION=us-east-1"}
}

// objStore is the store the nemesis disturbs; nil without files.
func (w *fileWorkload) objStore() *objStore {
	if w == nil {
		return nil
	}
	return w.store
}

func (w *fileWorkload) close() {
	if w != nil && w.store != nil {
		w.store.close()
	}
}

// diff compares every file partition's target rows with its files.
type fileDiff struct {
	lost, stale, unexpected, doubled, equal int
	first                                   []string
}

func (w *fileWorkload) diff(ctx context.Context, db querier) (fileDiff, error) {
	var out fileDiff
	for di := range fileDatasets {
		d := &fileDatasets[di]
		type got struct {
			amount, note string
			version      int
			n            int
		}
		have := map[string]map[int64]*got{}
		rows, err := db.Query(ctx, "SELECT id, event_date::text, amount::text, coalesce(note, '<null>'), coalesce(version, -1) FROM "+d.target)
		if err != nil {
			return out, fmt.Errorf("chaos: read %s: %w", d.target, err)
		}
		for rows.Next() {
			var id int64
			var day string
			var g got
			if err := rows.Scan(&id, &day, &g.amount, &g.note, &g.version); err != nil {
				rows.Close()
				return out, err
			}
			if have[day] == nil {
				have[day] = map[int64]*got{}
			}
			if prev := have[day][id]; prev != nil {
				prev.n++
				continue
			}
			g.n = 1
			have[day][id] = &g
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, err
		}
		for _, p := range w.parts {
			if p.ds != d {
				continue
			}
			tgt := have[p.key]
			delete(have, p.key)
			bad := 0
			want := map[int64]bool{}
			for _, rs := range p.files {
				for _, r := range rs {
					want[r.id] = true
					g := tgt[r.id]
					switch {
					case !p.landed:
						continue
					case g == nil:
						out.lost++
						bad++
					case g.amount != fmt.Sprintf("%d.%02d", r.cents/100, r.cents%100) || g.note != r.note || g.version != r.version:
						out.stale++
						bad++
					}
					if g != nil && g.n > 1 {
						out.doubled += g.n - 1
						bad++
					}
				}
			}
			for id := range tgt {
				if !want[id] || !p.landed {
					out.unexpected++
					bad++
				}
			}
			if bad == 0 {
				out.equal++
			} else if len(out.first) < 5 {
				out.first = append(out.first, fmt.Sprintf("%s %s", d.name, p.key))
			}
		}
		for day, ids := range have {
			out.unexpected += len(ids)
			if len(out.first) < 5 {
				out.first = append(out.first, fmt.Sprintf("%s %s (no such partition)", d.name, day))
			}
		}
	}
	return out, nil
}

// waitCaughtUp waits until every partition's target rows equal its files,
// at most until deadline, and records how long after lastFault that was.
func (w *fileWorkload) waitCaughtUp(ctx context.Context, db querier, lastFault, deadline time.Time, r *Report) {
	if w == nil {
		return
	}
	w.wait()
	r.Files = w.figures()
	var last fileDiff
	for {
		d, err := w.diff(ctx, db)
		if err == nil && d.lost+d.stale+d.unexpected+d.doubled == 0 {
			r.Files.CaughtUp = true
			r.Files.CaughtUpSeconds = time.Since(lastFault).Seconds()
			w.logf("chaos: files: every partition equals its files %.1fs after the last fault", r.Files.CaughtUpSeconds)
			return
		}
		if err == nil {
			last = d
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.violate("file partitions do not equal their files %s after the last fault: %d rows lost, %d stale, %d unexpected, %d doubled (%s)",
				time.Since(lastFault).Round(time.Second), last.lost, last.stale, last.unexpected, last.doubled, strings.Join(last.first, ", "))
			return
		}
		sleepCtx(ctx, time.Second)
	}
}

func (w *fileWorkload) figures() *FileFigures {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := &FileFigures{Partitions: len(w.parts), Landed: w.landed, Corrections: w.corrects, Puts: w.puts, PutRetries: w.retries}
	for _, d := range fileDatasets {
		f.Datasets = append(f.Datasets, d.name+"("+d.format+", "+d.strategy+")")
	}
	c := w.store.errs.counts()
	f.ProxyRequests, f.ProxyErrors, f.ProxyCuts = c.requests, c.errors, c.cuts
	return f
}

// checkFiles proves, once the replicas have stopped, that every file
// partition equals its files row for row, that each load read files
// (source_files) and no file version was loaded twice, that every run of a
// file dataset came from a watch and loaded once, and that no event of a
// file dataset was dead-lettered.
func (w *fileWorkload) checkFiles(ctx context.Context, db querier, js jetstream.JetStream, r *Report) error {
	if w == nil {
		return nil
	}
	if r.Files == nil {
		r.Files = w.figures()
	}
	f := r.Files
	d, err := w.diff(ctx, db)
	if err != nil {
		return err
	}
	f.LostRows, f.StaleRows, f.UnexpectedRows, f.DoubledRows, f.PartitionsEqual = d.lost, d.stale, d.unexpected, d.doubled, d.equal
	if n := d.lost + d.stale + d.unexpected + d.doubled; n > 0 {
		r.violate("file partitions differ from their files: %d rows lost, %d stale, %d unexpected, %d doubled (%s)",
			d.lost, d.stale, d.unexpected, d.doubled, strings.Join(d.first, ", "))
	}
	names := make([]string, len(fileDatasets))
	for i, d := range fileDatasets {
		names[i] = d.name
	}
	err = db.QueryRow(ctx, `
SELECT (SELECT count(*) FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = ANY($2) AND status = 'success'),
       (SELECT count(*) FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = ANY($2) AND status = 'failed'),
       (SELECT count(*) FROM idem.pipeline_audit a WHERE a.dag_id = $1 AND a.task_id = ANY($2) AND a.status = 'success'
           AND NOT EXISTS (SELECT 1 FROM idem.source_files f WHERE f.audit_id = a.id)),
       (SELECT count(*) FROM (SELECT 1 FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = ANY($2) AND status = 'success'
           GROUP BY task_id, partition_key, run_id HAVING count(*) > 1) x),
       (SELECT count(*) FROM idem.run_ledger WHERE dag_id = $1 AND task_id = ANY($2) AND (run_id NOT LIKE 'watch-%' OR loads <> 1)),
       (SELECT count(*) FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = ANY($2) AND status = 'skipped' AND error LIKE 'superseded:%')`,
		pipeline, names).Scan(&f.Loads, &f.FailedAttempts, &f.LoadsNoFiles, &f.RunsTwice, &f.ForeignRuns, &f.Superseded)
	if err != nil {
		return fmt.Errorf("chaos: check file loads: %w", err)
	}
	for _, v := range []struct {
		n    int
		what string
	}{
		{f.LoadsNoFiles, "successful loads of file partitions recorded no source file"},
		{f.RunsTwice, "watch runs of file partitions succeeded more than once"},
		{f.ForeignRuns, "ledger rows of file datasets are not a watch's run loaded once"},
	} {
		if v.n > 0 {
			r.violate("%d %s", v.n, v.what)
		}
	}
	// The same listing (its fingerprint: every file's ETag) loaded by two
	// successes: a file version loaded twice.
	rows, err := db.Query(ctx, `
SELECT task_id, partition_key, fingerprint, count(*), string_agg(run_id || ' (audit ' || id || ')', ', ' ORDER BY id)
  FROM (SELECT DISTINCT a.id, a.task_id, a.partition_key, a.run_id, s.fingerprint
          FROM idem.pipeline_audit a JOIN idem.source_files s ON s.audit_id = a.id
         WHERE a.dag_id = $1 AND a.task_id = ANY($2) AND a.status = 'success') x
 GROUP BY 1, 2, 3 HAVING count(*) > 1`, pipeline, names)
	if err != nil {
		return fmt.Errorf("chaos: check file versions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ds, part, fp, runs string
		var n int
		if err := rows.Scan(&ds, &part, &fp, &n, &runs); err != nil {
			return err
		}
		f.VersionTwice++
		if f.VersionTwice <= 5 {
			r.violate("%s %s: the same files (fingerprint %.16s) loaded %d times: %s", ds, part, fp, n, runs)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	dls, err := readDeadLetters(ctx, js)
	if err != nil {
		return err
	}
	for _, dl := range dls {
		if !isFileSubject(dl.subject) {
			continue
		}
		f.DeadLetters++
		if f.DeadLetters <= 5 {
			r.violate("an event of a file dataset was dead-lettered (%s after %s deliveries at %s): %s",
				dl.kind, dl.deliveries, dl.failedAt.Format("15:04:05.000"), cut(dl.err, 200))
		}
	}
	return nil
}

// errNoFiles is what Validate says of object-store kinds without files.
var errNoFiles = errors.New("the object-store faults need Files: the file datasets and their store")

// print writes the file datasets' lines of the report.
func (f *FileFigures) print(w io.Writer) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "files         %s, %d partitions (%d landed during the phase), %d corrections, %d puts (%d retried); "+
		"idem: %d loads, %d failed attempts, %d runs superseded; error proxy: %d of %d requests answered with an error, %d bodies cut\n",
		strings.Join(f.Datasets, ","), f.Partitions, f.Landed, f.Corrections, f.Puts, f.PutRetries,
		f.Loads, f.FailedAttempts, f.Superseded, f.ProxyErrors, f.ProxyRequests, f.ProxyCuts)
	fmt.Fprintf(w, "files check   caught up %v %.1fs after the last fault; %d partitions equal to their files; lost %d, stale %d, unexpected %d, doubled %d rows; "+
		"%d file versions loaded twice, %d loads without files, %d runs loaded twice, %d ledger rows not a watch's, %d dead letters\n",
		f.CaughtUp, f.CaughtUpSeconds, f.PartitionsEqual, f.LostRows, f.StaleRows, f.UnexpectedRows, f.DoubledRows,
		f.VersionTwice, f.LoadsNoFiles, f.RunsTwice, f.ForeignRuns, f.DeadLetters)
}
