package bench

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"time"
)

// Results is everything one run measured; the JSON file is this struct, and
// the report and the chart are rendered from it alone.
type Results struct {
	Mode     Mode      `json:"mode"`
	Sizes    Sizes     `json:"sizes"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	// Load is /proc/loadavg at each phase boundary: the box is shared.
	Load []LoadSample `json:"load"`

	Small      []SmallPoint    `json:"small"`
	Duplicates []DupPoint      `json:"duplicates"`
	Skipped    []SkipPoint     `json:"skipped"`
	Steps      []Step          `json:"steps"`
	Statements []Statement     `json:"statements"`
	Big        []BigSize       `json:"big"`
	Backfill   []BackfillPoint `json:"backfill"`
	Memory     []MemSample     `json:"memory"`
	// Checks is (g): loads with and without a dataset's checks.
	Checks *ChecksResult `json:"checks,omitempty"`
	// Tracing is (h): small events with tracing on (the collector down)
	// and off.
	Tracing *TracingResult `json:"tracing,omitempty"`
	Lone    *LoneResult    `json:"lone,omitempty"`
	// Lanes is (k): live events during a backfill.
	Lanes *LanesResult `json:"lanes,omitempty"`
	// StatementModes is (j): idem with each postgres.statement_mode, and
	// through PgBouncer.
	StatementModes *StatementModesResult `json:"statement_modes,omitempty"`
	// Notes are remarks the run made about itself: fallbacks, warnings.
	Notes []string `json:"notes,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPU      string            `json:"cpu"`
	CPUs     int               `json:"cpus"`
	MemGiB   float64           `json:"mem_gib"`
	Kernel   string            `json:"kernel"`
	Go       string            `json:"go"`
	Postgres string            `json:"postgres"`
	NATS     string            `json:"nats"`
	Commit   string            `json:"commit"`
	Settings map[string]string `json:"settings"`
	OwnPG    bool              `json:"own_postgres"`
	OwnNATS  bool              `json:"own_nats"`
	// NATSSync is the JetStream sync_interval of the day-one scenario's
	// nats-server process ("always", as shipped, or "default").
	NATSSync  string          `json:"nats_sync,omitempty"`
	Extension map[string]bool `json:"extensions"`
}

// LoadSample is the load average at a moment of the run.
type LoadSample struct {
	At     string  `json:"at"`
	Load1  float64 `json:"load1"`
	Load5  float64 `json:"load5"`
	Load15 float64 `json:"load15"`
}

// Throughput of one method: events/s of each repetition and their median.
type Throughput struct {
	Events int       `json:"events"`
	Runs   []float64 `json:"runs"`
	PerSec float64   `json:"per_sec"`
}

func (t *Throughput) add(events int, elapsed time.Duration) {
	t.Events = events
	t.Runs = append(t.Runs, float64(events)/elapsed.Seconds())
	t.PerSec = median(t.Runs)
}

// Latency of one method under a paced load, in milliseconds.
type Latency struct {
	Events     int     `json:"events"`
	RatePerSec float64 `json:"rate_per_sec"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	Max        float64 `json:"max_ms"`
}

// Method is what one way of loading the small events did.
type Method struct {
	Throughput Throughput `json:"throughput"`
	Latency    *Latency   `json:"latency,omitempty"`
	// AvgLatencyMs is pgbench's own average (closed loop), when it ran.
	AvgLatencyMs float64 `json:"avg_latency_ms,omitempty"`
	// CPU is the processor time per event of the closed-loop runs, by
	// process, when it was measured (the cluster is on this machine).
	CPU     *CPU `json:"cpu,omitempty"`
	cpuRuns int
}

// Names of the small-event methods.
const (
	MIdem         = "idem"          // idem serve, end to end through JetStream
	MHandler      = "idem_handler"  // idem's handler called in-process, no NATS
	MLimit        = "limit_sql"     // the SQL idem issues, replayed by a pgx loop
	MFloor        = "floor_sql"     // BEGIN; DELETE; INSERT .. SELECT; COMMIT, pgx loop
	MPgbenchFloor = "pgbench_floor" // the floor under pgbench -M prepared
	MPgbench1tx   = "pgbench_1tx"   // audit insert + floor + audit update in one tx, pgbench
	MNaive        = "naive"         // nats.go pull, INSERT .. SELECT, ack after commit
)

// SmallPoint is every method at one max_in_flight.
type SmallPoint struct {
	InFlight int                `json:"in_flight"`
	Methods  map[string]*Method `json:"methods"`
}

func (p *SmallPoint) method(name string) *Method {
	if p.Methods == nil {
		p.Methods = map[string]*Method{}
	}
	m, ok := p.Methods[name]
	if !ok {
		m = &Method{}
		p.Methods[name] = m
	}
	return m
}

// DupPoint is (b): every event delivered twice.
type DupPoint struct {
	InFlight     int     `json:"in_flight"`
	Messages     int     `json:"messages"`
	IdemPerSec   float64 `json:"idem_msgs_per_sec"`
	IdemDoubled  int64   `json:"idem_rows_doubled"`
	IdemSkipped  int64   `json:"idem_skipped"`
	NaivePerSec  float64 `json:"naive_msgs_per_sec"`
	NaiveDoubled int64   `json:"naive_rows_doubled"`
}

// SkipPoint is (f): redeliveries of runs that already succeeded.
type SkipPoint struct {
	InFlight int    `json:"in_flight"`
	Idem     Method `json:"idem"`
	Limit    Method `json:"limit_sql"`
}

// Step is one round trip of the captured per-event SQL, timed in the replay
// at concurrency 1.
type Step struct {
	Index  int     `json:"index"`
	Kind   string  `json:"kind"`
	SQL    string  `json:"sql"`
	MeanUs float64 `json:"mean_us"`
	Share  float64 `json:"share"`
}

// Statement is one normalised statement of pg_stat_statements during idem's
// end-to-end run at max_in_flight 1.
type Statement struct {
	Query         string  `json:"query"`
	CallsPerEvent float64 `json:"calls_per_event"`
	MeanUs        float64 `json:"mean_us"`
	UsPerEvent    float64 `json:"us_per_event"`
	// PlansPerCall is how often the statement was planned per execution
	// (1: a custom plan every time; near 0: the cached generic plan), and
	// PlanUsPerEvent what planning it cost per event (track_planning).
	PlansPerCall   float64 `json:"plans_per_call"`
	PlanUsPerEvent float64 `json:"plan_us_per_event"`
}

// BigSize holds the big-partition figures for one partition size.
type BigSize struct {
	Rows   int              `json:"rows"`
	Label  string           `json:"label"`
	Cases  map[string]Op    `json:"cases"`
	Reruns map[string][]Op  `json:"reruns"`
	View   []ViewRead       `json:"view_reads"`
	Extra  map[string]int64 `json:"extra,omitempty"`
}

// Op is one timed load of a big partition.
type Op struct {
	// Run is idem's run_id, to find the load in the idem log.
	Run string  `json:"run,omitempty"`
	Ms  float64 `json:"ms"`
	// InTxMs is idem's audit finished_at - started_at: the load itself,
	// without the ledger check and the `started` commit before it.
	InTxMs     float64 `json:"in_tx_ms,omitempty"`
	Route      string  `json:"route,omitempty"`
	WALBytes   int64   `json:"wal_bytes"`
	DeadTuples int64   `json:"dead_tuples"`
	TableBytes int64   `json:"table_bytes"`
	Rows       int64   `json:"rows,omitempty"`
}

// ViewRead is the time to read one partition through append_dedupe's view.
type ViewRead struct {
	TableRows int64   `json:"table_rows"`
	Ms        float64 `json:"ms"`
}

// BackfillPoint is (d) at one max_in_flight.
type BackfillPoint struct {
	InFlight       int     `json:"in_flight"`
	Partitions     int     `json:"partitions"`
	Rows           int     `json:"rows_per_partition"`
	IdemSeconds    float64 `json:"idem_seconds"`
	CommandSeconds float64 `json:"command_seconds"`
	BareSeconds    float64 `json:"bare_seconds"`
	Publisher      string  `json:"publisher"`
	PeakRSSMiB     float64 `json:"peak_rss_mib"`
}

// MemSample is the peak RSS of one `idem serve` child.
type MemSample struct {
	Phase    string  `json:"phase"`
	InFlight int     `json:"in_flight"`
	PeakMiB  float64 `json:"peak_mib"`
}

// ChecksResult is (g): what a dataset's checks cost, as ratios to the same
// loads without them, in the same run.
type ChecksResult struct {
	Rows  int    `json:"rows"`
	Label string `json:"label"`
	Reps  int    `json:"reps"`
	// Big are the timed delete_insert loads of one partition of Rows rows
	// per variant (ChecksNone, ChecksRowCountChange, ChecksAll), in the
	// order they ran; the variants take turns.
	Big map[string][]ChecksLoad `json:"big"`
	// Dissect is the checks' statement taken apart, in a transaction
	// that does the load's DELETE + INSERT and rolls back.
	Dissect *ChecksDissect `json:"dissect,omitempty"`
	// Small is 10-row partitions with a row_count check and without, end
	// to end through idem serve, at each max_in_flight.
	Small []ChecksSmall `json:"small"`
	// Replay is idem's captured SQL of a small load with the row_count
	// check and without, replayed in turns on one connection.
	Replay *ChecksReplay `json:"replay,omitempty"`
	// From is the run that measured these figures when a report took them
	// from another results file (idembench -checks).
	From *RunRef `json:"from,omitempty"`
}

// ChecksLoad is one timed load of (g).
type ChecksLoad struct {
	Op
	// Turn is its place in its round of the variants (0: first).
	Turn int `json:"turn"`
	// ChecksMs is idem's own timing of the checks' round trip (SAVEPOINT,
	// the statement, RELEASE), from idem.check_results.duration_ms.
	ChecksMs float64 `json:"checks_ms,omitempty"`
	// Outcomes are the checks' names and statuses.
	Outcomes string `json:"outcomes,omitempty"`
}

// ChecksDissect times the statements the checks build, captured from idem's
// handler, inside one transaction: the baseline count (row_count_change),
// the load, a bare count(*) of the produced rows, the checks' statement and
// its parts alone, the statement under other settings (medians of 3), and
// its EXPLAIN (ANALYZE, BUFFERS).
type ChecksDissect struct {
	Statement   string             `json:"statement"`
	BaselineMs  float64            `json:"baseline_ms"`
	LoadMs      float64            `json:"load_ms"`
	CountMs     float64            `json:"count_ms"`
	StatementMs float64            `json:"statement_ms"`
	Settings    map[string]float64 `json:"settings_ms"`
	// Alone are the statement's parts, each run alone (medians of 3): its
	// subqueries, and the rest (the shared scan and its counts).
	Alone     []PlanPart `json:"alone"`
	ExplainMs float64    `json:"explain_ms"`
	Parts     []PlanPart `json:"parts"`
	Plan      string     `json:"plan"`
}

// PlanPart is a piece of the checks' statement under EXPLAIN ANALYZE: each
// subquery the root runs (InitPlan, SubPlan) and the rest, its shared scan.
type PlanPart struct {
	Name   string  `json:"name"`
	Ms     float64 `json:"ms"`
	Detail string  `json:"detail"`
}

// ChecksSmall is (g)'s small events at one max_in_flight.
type ChecksSmall struct {
	InFlight int        `json:"in_flight"`
	Without  Throughput `json:"without"`
	With     Throughput `json:"with_row_count"`
}

// ChecksReplay is the SQL of one small load, captured from idem's handler
// with the row_count check and without, replayed Events times each in
// turns on one connection with idem's session settings: the round trips
// the check adds and what each costs.
type ChecksReplay struct {
	Events       int        `json:"events"`
	Without      Throughput `json:"without"`
	With         Throughput `json:"with_row_count"`
	StepsWithout []Step     `json:"steps_without"`
	StepsWith    []Step     `json:"steps_with"`
}

// RunRef names a run: how it was started, when, on which commit, and how
// busy the machine was.
type RunRef struct {
	Command  string       `json:"command"`
	Mode     Mode         `json:"mode"`
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished"`
	Commit   string       `json:"commit"`
	Load     []LoadSample `json:"load"`
}

// TakeChecks puts o's checks figures (g) into r, which has none, naming the
// run that measured them: a report of a full run can then show the figures
// of a later `-only checks` run.
func (r *Results) TakeChecks(o *Results) error {
	if o.Checks == nil {
		return errors.New("the results hold no checks figures (g)")
	}
	if r.Checks != nil {
		return errors.New("the report's run has checks figures (g) of its own")
	}
	c := *o.Checks
	if c.From == nil {
		c.From = o.ref()
	}
	r.Checks = &c
	return nil
}

// TakeStatements puts o's statement-mode figures (j) into r, which has
// none, naming the run that measured them, as TakeChecks does for (g).
func (r *Results) TakeStatements(o *Results) error {
	if o.StatementModes == nil {
		return errors.New("the results hold no statement-mode figures (j)")
	}
	if r.StatementModes != nil {
		return errors.New("the report's run has statement-mode figures (j) of its own")
	}
	s := *o.StatementModes
	if s.From == nil {
		s.From = o.ref()
	}
	r.StatementModes = &s
	return nil
}

// ref names run r.
func (r *Results) ref() *RunRef {
	return &RunRef{Command: r.Command, Mode: r.Mode, Started: r.Started, Finished: r.Finished, Commit: r.Machine.Commit, Load: r.Load}
}

// Save writes r as indented JSON.
func (r *Results) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Load reads a results file.
func Load(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	return &r, json.Unmarshal(b, &r)
}

func (r *Results) note(format string, args ...any) {
	r.Notes = append(r.Notes, sprintf(format, args...))
}

func (r *Results) point(c int) *SmallPoint {
	for i := range r.Small {
		if r.Small[i].InFlight == c {
			return &r.Small[i]
		}
	}
	r.Small = append(r.Small, SmallPoint{InFlight: c})
	return &r.Small[len(r.Small)-1]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile is the nearest-rank percentile of ds, in milliseconds.
func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i]) / float64(time.Millisecond)
}

func latencyOf(ds []time.Duration, rate float64) *Latency {
	return &Latency{Events: len(ds), RatePerSec: rate, P50: percentile(ds, 50), P99: percentile(ds, 99), Max: percentile(ds, 100)}
}
