package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// The sources section of docs/BENCHMARKS.md (Section: one table and two
// sentences) and of bench/FIGURES.md (Markdown: every load), rendered
// from SourcesResults alone (`idembench -report … -sources FILE -docs docs`).

// Save writes r as indented JSON.
func (r *SourcesResults) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// LoadSources reads a file SourcesResults.Save wrote.
func LoadSources(path string) (*SourcesResults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r SourcesResults
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// srcWayLabels name the ways in the figures, in the order listed.
var srcWayLabels = []struct{ key, label string }{
	{SrcCopyCSV, "psql `\\copy` of the CSV: the files' reference"},
	{SrcStagedCSV, "psql, idem's steps by hand: temporary table, `\\copy`, DELETE, INSERT … SELECT, one transaction"},
	{SrcIdemCSV, "idem, CSV on local disk"},
	{SrcIdemCSVS3, "idem, the same CSV in S3 (versitygw)"},
	{SrcIdemNDJSON, "idem, NDJSON on local disk"},
	{SrcIdemParquet, "idem, Parquet on local disk"},
	{SrcPipe, "psql `COPY (…) TO STDOUT` \\| psql `COPY … FROM STDIN`: the reference from another PostgreSQL"},
	{SrcIdemPG, "idem, from another PostgreSQL"},
}

// srcTargets are the load targets: an idem way over its reference.
var srcTargets = []struct {
	way, ref, what string
	limit          float64
}{
	{SrcIdemCSV, SrcCopyCSV, "CSV, local disk ÷ `\\copy`", 1.15},
	{SrcIdemCSVS3, SrcCopyCSV, "CSV, S3 (versitygw) ÷ `\\copy`", 1.25},
	{SrcIdemParquet, SrcCopyCSV, "Parquet, local disk ÷ `\\copy` of the CSV", 1.5},
	{SrcIdemPG, SrcPipe, "another PostgreSQL ÷ `psql COPY TO \\| psql COPY FROM`", 1.15},
}

// srcMemoryLimit is the peak RSS target of a large load, in MiB.
const srcMemoryLimit = 96

// med is the median time of a way's loads, and of their time in the
// load's transaction.
func (r *SourcesResults) med(key string) (ms, inTx float64) {
	var a, b []float64
	for _, l := range r.Loads[key] {
		a = append(a, l.Ms)
		if l.InTxMs > 0 {
			b = append(b, l.InTxMs)
		}
	}
	return median(a), median(b)
}

// memoryCell is the peak RSS of each format, slashed, and whether all are
// within the target.
func (r *SourcesResults) memoryCell() (string, bool) {
	var xs []string
	ok := true
	for _, m := range r.Memory {
		cell := num(m.PeakMiB)
		if m.PeakMiB > srcMemoryLimit {
			ok, cell = false, "**"+cell+"**"
		}
		xs = append(xs, cell)
	}
	return strings.Join(xs, " / "), ok
}

func (r *SourcesResults) memoryFormats() string {
	var xs []string
	for _, m := range r.Memory {
		xs = append(xs, labelFormat(m.Format))
	}
	return strings.Join(xs, " / ")
}

func labelFormat(f string) string {
	if f == fmtParquet {
		return "Parquet"
	}
	return strings.ToUpper(f)
}

// bigLabel is the least size of the memory loads' files, e.g. "1 GiB".
func (r *SourcesResults) bigLabel() string {
	least := int64(0)
	for _, m := range r.Memory {
		if least == 0 || m.Bytes < least {
			least = m.Bytes
		}
	}
	if least >= 1<<30 {
		return fmt.Sprintf("%d GiB", least>>30)
	}
	return fmt.Sprintf("%d MiB", least>>20)
}

// Verdicts are the sources targets: one per load target, then the
// memory one.
func (r *SourcesResults) Verdicts() []Verdict {
	var out []Verdict
	for _, tg := range srcTargets {
		i, _ := r.med(tg.way)
		ref, _ := r.med(tg.ref)
		if i == 0 || ref == 0 {
			continue
		}
		out = append(out, Verdict{Target: fmt.Sprintf("sources, %s rows: %s ≤ %.2f×", labelRows(r.Rows), tg.what, tg.limit),
			Measured: fmt.Sprintf("%s vs %s ms = %.2f×", num(i), num(ref), i/ref), Met: i/ref <= tg.limit})
	}
	if len(r.Memory) > 0 {
		cell, ok := r.memoryCell()
		out = append(out, Verdict{Target: fmt.Sprintf("sources: peak RSS ≤ %d MiB loading %s of %s", srcMemoryLimit, r.bigLabel(), r.memoryFormats()),
			Measured: cell + " MiB", Met: ok})
	}
	return out
}

// Section is the sources part of docs/BENCHMARKS.md: one table, two
// sentences.
func (r *SourcesResults) Section() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("## Sources: files and another PostgreSQL\n\n")
	t := &table{head: []string{labelRows(r.Rows) + " rows into an empty table", "idem ms", "psql ms", "ratio", "target", "verdict"}}
	for _, tg := range srcTargets {
		i, _ := r.med(tg.way)
		ref, _ := r.med(tg.ref)
		if i == 0 || ref == 0 {
			continue
		}
		what, _, _ := strings.Cut(tg.what, " ÷ ")
		cell, verdict := fmt.Sprintf("%.2f×", i/ref), "met"
		if i/ref > tg.limit {
			cell, verdict = "**"+cell+"**", "**missed**"
		}
		t.add(what, num(i), num(ref), cell, fmt.Sprintf("≤ %.2f×", tg.limit), verdict)
	}
	if len(r.Memory) > 0 {
		cell, ok := r.memoryCell()
		verdict := "met"
		if !ok {
			verdict = "**missed**"
		}
		t.add(fmt.Sprintf("peak RSS, %s %s", r.bigLabel(), r.memoryFormats()), cell+" MiB", "", "", fmt.Sprintf("≤ %d MiB", srcMemoryLimit), verdict)
	}
	w("%s\n", t)
	w("Medians of %d loads each, in turns (`make bench-sources`, %s UTC, commit %s): `idem serve`'s delete_insert, which copies straight into the target, from publish to ack, against `psql` from start to exit. ",
		r.Reps, r.Started.Format("2006-01-02 15:04"), orDefault(r.Machine.Commit, "unknown"))
	w("Where the time goes: [bench/NOTES.md](%s#sources-files-and-another-postgresql); every load: [bench/FIGURES.md](%s#sources-files-and-another-postgresql).\n\n", notesFromDocs, figuresFromDocs)
	return b.String()
}

// Markdown is the sources section of bench/FIGURES.md: every way's loads,
// the memory loads, the top statements and the method.
func (r *SourcesResults) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("## Sources: files and another PostgreSQL\n\n")
	w("From one `%s` run (mode **%s**) that started %s UTC and took %s, commit %s, on %d vCPU; figures of their own, apart from the rest of this file.\n\n",
		orDefault(r.Command, "idembench"), r.Mode, r.Started.Format("2006-01-02 15:04"), r.Finished.Sub(r.Started).Round(1e9),
		orDefault(r.Machine.Commit, "unknown"), r.Machine.CPUs)
	var files []string
	for _, f := range srcFormats {
		if fi, ok := r.Files[f]; ok {
			files = append(files, fmt.Sprintf("%s %s MiB", labelFormat(f), mb(fi.Bytes)))
		}
	}
	w("One partition of %s rows (%s), loaded %d times each way, in turns. ", thousands(int64(r.Rows)), strings.Join(files, ", "), r.Reps)
	w("Ratios are of the medians; CPU is seconds per load, mean of the loads.\n\n")
	t := &table{head: []string{"way", "median ms", "loads ms", "in transaction ms", "÷ reference", "WAL MB", "CPU s: PostgreSQL / source / client"}}
	for _, l := range srcWayLabels {
		loads := r.Loads[l.key]
		if len(loads) == 0 {
			continue
		}
		m, inTx := r.med(l.key)
		var all []string
		var wal, pg, src, cl float64
		for _, ld := range loads {
			all = append(all, num(ld.Ms))
			wal += float64(ld.WALBytes)
			pg += ld.PostgresCPU
			src += ld.SourceCPU
			cl += ld.ClientCPU
		}
		n := float64(len(loads))
		ref := SrcCopyCSV
		switch l.key {
		case SrcIdemPG:
			ref = SrcPipe
		case SrcCopyCSV, SrcPipe:
			ref = ""
		}
		x := "–"
		if ref != "" {
			rm, _ := r.med(ref)
			x = ratio(m, rm)
		}
		t.add(l.label, num(m), strings.Join(all, ", "), num(inTx), x, mb(int64(wal/n)),
			num(pg/n)+" / "+num(src/n)+" / "+num(cl/n))
	}
	w("%s\n", t)
	if s, _ := r.med(SrcStagedCSV); s > 0 {
		i, _ := r.med(SrcIdemCSV)
		c, _ := r.med(SrcCopyCSV)
		w("idem's CSV load ÷ the same steps by hand: %s; the steps by hand ÷ `\\copy`: %s.\n\n", ratio(i, s), ratio(s, c))
	}
	if len(r.Memory) > 0 {
		w("### Peak RSS over a large file\n\n")
		mt := &table{head: []string{"format", "file MiB", "rows", "load s", "VmHWM MiB once started", "VmHWM MiB after the load", "target"}}
		for _, m := range r.Memory {
			peak := num(m.PeakMiB)
			if m.PeakMiB > srcMemoryLimit {
				peak = "**" + peak + "**"
			}
			mt.add(labelFormat(m.Format), mb(m.Bytes), thousands(m.Rows), num(m.Ms/1000), num(m.StartMiB), peak, fmt.Sprintf("≤ %d MiB", srcMemoryLimit))
		}
		w("%s\n", mt)
	}
	w("**Method.** The target is `%s %s` with index(event_date), autovacuum off, on the benchmark's PostgreSQL; the source a second cluster with the same settings, its `%s` holding the partition and 10 rows of the day before, index(event_date), analysed. ", srcTarget, srcDDL, srcTable)
	w("The files are one per partition under `dt=YYYY-MM-DD/`: CSV with a header (ISO timestamps), NDJSON (one object per line, the amount a JSON number), Parquet written by parquet-go (Snappy, the customer dictionary-encoded, DATE, DECIMAL(12,2), TIMESTAMP(µs, UTC), a row group per %s rows); the S3 way reads the same CSV put into versitygw (posix backend, on this machine). ", thousands(int64(r.GroupRows)))
	w("One `idem serve` (the harness's config: defaults, info logs, the status page and metrics on) holds a delete_insert dataset per way into the same target; each dataset first loads a 10-row partition, untimed. ")
	w("Before every load: TRUNCATE the target and CHECKPOINT. idem's time runs from the publish of the partition's event to idem's ack, which follows the commit; its in-transaction time is the audit's started_at → finished_at. psql runs as `psql -X -d URL -c …` (the pipe: two of them), timed from start to exit. ")
	if r.WarmUp {
		w("A round of every way, unrecorded, comes first (the files in the page cache, the source table in shared_buffers). ")
	}
	w("Each round starts one way further in the order of the table. The memory loads: a file of each format of at least %s, written before a new `idem serve` starts with that one dataset, loaded by one event; VmHWM from /proc/PID/status once serve is up and after the ack. Run with `make bench-sources`.\n\n", r.bigLabel())
	if len(r.Notes) > 0 {
		w("Remarks of the run:\n\n")
		for _, n := range r.Notes {
			w("- %s\n", n)
		}
		w("\n")
	}
	for _, l := range srcWayLabels {
		if top := r.Top[l.key]; len(top) > 0 {
			w("<details><summary>Top statements in the target database, %s (its last load, by execution + planning time)</summary>\n\n", l.label)
			w("%s", coldStatementsTable(top))
			w("\n</details>\n\n")
		}
	}
	return b.String()
}
