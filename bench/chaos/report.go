package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Report holds the figures of one campaign. Its JSON is what
// docs/RELIABILITY.md quotes; the text block (Print) is the same, for people.
type Report struct {
	Seed     int64  `json:"seed"`
	Topology string `json:"topology"`
	// Pooler is the pool mode of the pooler in front of PostgreSQL; empty
	// without one.
	Pooler string `json:"pooler,omitempty"`
	// LeastPrivilege: the replicas ran as grants.sql's role.
	LeastPrivilege bool     `json:"least_privilege,omitempty"`
	Replicas       int      `json:"replicas"`
	Datasets       []string `json:"datasets"`
	Partitions     int      `json:"partitions_per_dataset"`
	AckWait        string   `json:"ack_wait"`
	CrashProb      float64  `json:"crash_prob"`
	NoFaults       bool     `json:"no_faults,omitempty"`
	// The retry settings every dataset ran with, and the longest a
	// message's retries can wait in all: every warehouse_down outlasts it.
	Retries              int     `json:"retries"`
	RetryDelay           string  `json:"retry_delay"`
	MaxRetryDelay        string  `json:"max_retry_delay"`
	RetryScheduleSeconds float64 `json:"retry_schedule_seconds"`

	FaultPhaseSeconds float64 `json:"fault_phase_seconds"`
	DrainSeconds      float64 `json:"drain_seconds"` // last fault healed -> nothing pending
	DrainBoundSeconds float64 `json:"drain_bound_seconds"`
	WallSeconds       float64 `json:"wall_seconds"`

	Events   EventFigures    `json:"events"`
	Messages MessageFigures  `json:"messages"`
	Faults   FaultFigures    `json:"faults"`
	Audit    map[string]int  `json:"audit_rows"` // status or status/error_kind -> rows
	Exits    ExitFigures     `json:"process_exits"`
	Reverify ReverifyFigures `json:"reverify"`
	Check    CheckFigures    `json:"check"`
	// StorageFull and Downstream are set by campaigns with js_storage_full
	// and with downstream events (faults_jsfull.go).
	StorageFull *StorageFullFigures `json:"storage_full,omitempty"`
	Downstream  *DownstreamFigures  `json:"downstream,omitempty"`
	// Source is the PostgreSQL source's, with Options.PGSource.
	Source *SourceFigures `json:"pg_source,omitempty"`
	// Timely is the moving world's (Options.Timely); nil without.
	Timely *TimelyFigures `json:"timely,omitempty"`
	// Files are the file datasets' figures (Options.Files); nil without.
	Files *FileFigures `json:"files,omitempty"`

	// Violations lists every invariant that failed, one line each; empty
	// means the campaign passed.
	Violations []string `json:"violations"`
	// Notes are observations that are not violations (transient dead
	// letters explained by faults, replicas that failed to start while the
	// database was down, ...).
	Notes []string `json:"notes,omitempty"`
}

// EventFigures counts distinct events.
type EventFigures struct {
	Total          int `json:"total"`   // valid + fatal + settle
	Valid          int `json:"valid"`   // fault phase, valid
	Fatal          int `json:"fatal"`   // fault phase, fatal inputs
	Replays        int `json:"replays"` // valid events for a (dataset, partition) already published, new run_id
	StagingChanges int `json:"staging_changes"`
	Settle         int `json:"settle"`
}

// MessageFigures counts publishes.
type MessageFigures struct {
	Published          int    `json:"published"`            // PubAcks received, every copy
	ExtraCopies        int    `json:"extra_copies"`         // copies beyond the first of an event
	WithMsgID          int    `json:"with_msg_id"`          // copies carrying Nats-Msg-Id
	DedupedByJetStream int    `json:"deduped_by_jetstream"` // PubAck.Duplicate
	LateCopies         int    `json:"late_copies"`          // 10-150 s after the first
	PublishRetries     int    `json:"publish_retries"`      // failed attempts, retried (NATS down)
	StoredInStream     uint64 `json:"stored_in_stream"`     // events stream's last sequence
	// StoredTwiceNoMsgID counts copies without Nats-Msg-Id that the stream
	// holds twice: a publish whose PubAck was lost, retried. Legitimate (the
	// ledger must absorb them); with a Nats-Msg-Id it is a violation.
	StoredTwiceNoMsgID int `json:"stored_twice_without_msg_id"`
	// DuringWarehouseOutages counts copies stored while a warehouse_down
	// fault had PostgreSQL stopped: messages idem had to hold.
	DuringWarehouseOutages int `json:"stored_during_warehouse_outages"`
}

// FaultFigures counts injected faults by kind.
type FaultFigures struct {
	Total   int            `json:"total"`
	ByKind  map[string]int `json:"by_kind"`
	Skipped int            `json:"skipped"` // drawn but not applicable (replica restarting)
	// CrashAfterSuccess counts crash-hook exits that followed a committed
	// success of the run they name; the others followed a skip or a failure
	// (still after the handler's last transaction, before the ack or nak).
	CrashAfterSuccess int `json:"crash_commit_after_success"`
	// The longest time PostgreSQL and NATS were down, stop to start.
	LongestWarehouseOutageSeconds float64 `json:"longest_warehouse_outage_seconds"`
	LongestNATSOutageSeconds      float64 `json:"longest_nats_outage_seconds"`
	// LongestPoolerOutageSeconds is the longest pooler_restart, stop to
	// start (Options.PoolMode only).
	LongestPoolerOutageSeconds float64 `json:"longest_pooler_outage_seconds,omitempty"`
	// SlowestResumeSeconds is the longest time from PostgreSQL coming back
	// after a warehouse_down to idem finishing a load again.
	SlowestResumeSeconds float64 `json:"slowest_resume_seconds"`
	// ReplicasRolled counts the replicas the rolling restarts restarted.
	ReplicasRolled int `json:"replicas_rolled"`
	// FailoverLostLoads counts the runs a failover's old primary had in its
	// ledger right before the kill and the promoted standby did not
	// (fault.LostLoads summed); FailoverLostInLedger, those of them the
	// final ledger has: loaded again. The checker's ledger figures say the
	// rest. The outage is the kill to the proxy's re-pointing; the resume,
	// from then to idem's next finished load.
	FailoverLostLoads            int     `json:"failover_lost_loads"`
	FailoverLostInLedger         int     `json:"failover_lost_loads_in_final_ledger"`
	LongestFailoverOutageSeconds float64 `json:"longest_failover_outage_seconds"`
	SlowestFailoverResumeSeconds float64 `json:"slowest_failover_resume_seconds"`
}

// ReverifyFigures sum the re-verification passes idem logged ("warehouse
// re-verified"), over every replica and incarnation: idem's own account of
// them, which the checker does not rely on. Unfinished passes (a warning,
// tried again) count their figures up to where they stopped.
type ReverifyFigures struct {
	Passes     int `json:"passes"`
	Unfinished int `json:"unfinished"`
	Checked    int `json:"checked"`
	Missing    int `json:"missing"`
	Reloaded   int `json:"reloaded"`
	Ahead      int `json:"loaded_ahead"`
	Skipped    int `json:"skipped"`
	Failed     int `json:"failed"`
}

// ExitFigures counts how idem processes ended.
type ExitFigures struct {
	Starts           int `json:"starts"`
	KilledByChaos    int `json:"killed"`
	CrashHook        int `json:"crash_hook"`
	StartupFailure   int `json:"failed_to_start"`   // exit 1 while a dependency was down
	GracefulRestarts int `json:"graceful_restarts"` // SIGTERM, exit 0: rolling restarts, and the crash hook turned off before the settle phase
	Other            int `json:"other"`
	CleanFinal       int `json:"clean_final_stops"`
}

// CheckFigures are the checker's counts; every one but the *OK fields must
// be zero for a pass.
type CheckFigures struct {
	TablesEqualReference bool `json:"tables_equal_reference"`
	LostRows             int  `json:"lost_rows"`       // staging keys missing from the target
	StaleRows            int  `json:"stale_rows"`      // present with other values
	UnexpectedRows       int  `json:"unexpected_rows"` // target keys not in staging
	DoubledRows          int  `json:"doubled_rows"`    // rows beyond the first per key
	RunsLoadedTwice      int  `json:"runs_loaded_twice"`
	LoadsWithoutRows     int  `json:"loads_without_rows"`  // append_dedupe: a ledger success with no rows
	RowsWithoutLoad      int  `json:"rows_without_load"`   // append_dedupe: rows of a run the ledger does not know
	ChainBreaks          int  `json:"load_history_breaks"` // delete_insert: a load deleted other than its predecessor inserted
	ReadsSampled         int  `json:"reads_sampled"`       // reader queries during the run
	ReadsSawDoubled      int  `json:"reads_saw_doubled"`   // of which showed a row twice

	ValidEvents        int `json:"valid_events"` // including settle
	SucceededOnce      int `json:"succeeded_once"`
	SuccessNotOne      int `json:"success_count_not_one"`
	LedgerForced       int `json:"ledger_loads_not_one"`
	UnaccountedEvents  int `json:"unaccounted_events"` // neither success nor dead letter
	UnexpectedLedger   int `json:"unexpected_ledger_rows"`
	ValidDeadLettered  int `json:"valid_dead_lettered"`    // valid events whose every copy ended in the DLQ
	ValidJudgedFatal   int `json:"valid_judged_fatal"`     // a valid copy dead-lettered as fatal: misclassification
	TransientDeadLtrs  int `json:"transient_dead_letters"` // exhausted or crashed copies of valid events
	TransientExplained int `json:"transient_explained"`    // of which excused: faults that end loads, no outage
	// ValidEventsDeadLettered counts valid events with at least one copy in
	// the dead-letter stream, excused or not: the figure the promise is
	// about ("outages and deploys never dead-letter a valid event").
	ValidEventsDeadLettered int `json:"valid_events_dead_lettered"`
	// ValidDeadLetteredInOutage counts copies of valid events dead-lettered
	// during an outage or a deploy: never excused.
	ValidDeadLetteredInOutage int `json:"valid_dead_lettered_in_outage"`

	FatalInputs          int  `json:"fatal_inputs"`
	FatalDeadLettered    int  `json:"fatal_dead_lettered_once"`
	FatalMissing         int  `json:"fatal_missing"`
	FatalDuplicated      int  `json:"fatal_duplicated"`
	FatalWrongReason     int  `json:"fatal_wrong_reason"`
	FatalRedelivered     int  `json:"fatal_after_more_than_one_delivery"`
	FatalRedeliveredExpl int  `json:"fatal_redelivered_explained"`
	FatalLoaded          int  `json:"fatal_loaded"` // a fatal input with a ledger success
	UnknownDeadLetters   int  `json:"unknown_dead_letters"`
	DLQCorrect           bool `json:"dlq_correct"`

	// StoredTwice counts copies published with a Nats-Msg-Id that the
	// events stream holds more than once; MissingMsgID copies planned with
	// one that the stream holds without it. Both must be 0: a producer that
	// retries across a leader change must not store an event twice.
	StoredTwice  int `json:"stored_twice_with_msg_id"`
	MissingMsgID int `json:"stored_without_planned_msg_id"`

	// Results counts the results stream against the audit.
	Results ResultFigures `json:"results"`

	// PooledLeftovers counts what the replicas left on the pooler's server
	// connections once stopped (Options.PoolMode only): session state, or
	// advisory locks of idle backends.
	PooledLeftovers int `json:"pooled_leftovers,omitempty"`

	Panics     int  `json:"panics"`
	Drained    bool `json:"drained_within_bound"`
	CleanStops bool `json:"clean_final_stops"`

	// With Options.LeastPrivilege: the lines of the replicas' logs where
	// the database refused the loader role, and whether a retention pass
	// ran (took its lease) under its grants.
	Refusals     int  `json:"refusals,omitempty"`
	RetentionRan bool `json:"retention_ran,omitempty"`
}

// OK reports whether every invariant held.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// JSON renders the report, indented.
func (r *Report) JSON() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return b
}

// Print writes the figures as a block.
func (r *Report) Print(w io.Writer) {
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	c := r.Check
	fmt.Fprintf(w, "== idem chaos campaign: %s ==\n", verdict)
	fmt.Fprintf(w, "topology      %s\n", r.Topology)
	fmt.Fprintf(w, "seed %d, %d replicas, datasets %s, %d partitions each, ack_wait %s, crash_prob %g\n",
		r.Seed, r.Replicas, strings.Join(r.Datasets, ","), r.Partitions, r.AckWait, r.CrashProb)
	fmt.Fprintf(w, "headline      %d events, %d faults; lost %d rows and %d events, doubled %d rows and %d runs; "+
		"%d valid events dead-lettered (%d copies during outages or deploys); longest warehouse outage %.1fs against a retry schedule of %.1fs\n",
		r.Events.Total, r.Faults.Total, c.LostRows, c.UnaccountedEvents, c.DoubledRows, c.RunsLoadedTwice+c.SuccessNotOne,
		c.ValidEventsDeadLettered, c.ValidDeadLetteredInOutage, r.Faults.LongestWarehouseOutageSeconds, r.RetryScheduleSeconds)
	fmt.Fprintf(w, "retries       %d, retry_delay %s, max_retry_delay %s: a message's retries wait %.1fs at most\n",
		r.Retries, r.RetryDelay, r.MaxRetryDelay, r.RetryScheduleSeconds)
	fmt.Fprintf(w, "duration      fault phase %.0fs, drain %.1fs (bound %.0fs), wall %.0fs\n",
		r.FaultPhaseSeconds, r.DrainSeconds, r.DrainBoundSeconds, r.WallSeconds)
	e := r.Events
	fmt.Fprintf(w, "events        %d distinct: %d valid (%d replays), %d fatal, %d settle; %d staging changes\n",
		e.Total, e.Valid, e.Replays, e.Fatal, e.Settle, e.StagingChanges)
	m := r.Messages
	fmt.Fprintf(w, "messages      %d published (%d extra copies, %d late), %d with Nats-Msg-Id, %d deduped by JetStream, %d stored, %d publish retries; "+
		"stored twice: %d with Nats-Msg-Id, %d without; %d stored without their Nats-Msg-Id\n",
		m.Published, m.ExtraCopies, m.LateCopies, m.WithMsgID, m.DedupedByJetStream, m.StoredInStream, m.PublishRetries,
		c.StoredTwice, m.StoredTwiceNoMsgID, c.MissingMsgID)
	fmt.Fprintf(w, "faults        %d injected: %s (%d skipped; %d crash_commit right after a committed success)\n",
		r.Faults.Total, kinds(r.Faults.ByKind), r.Faults.Skipped, r.Faults.CrashAfterSuccess)
	fmt.Fprintf(w, "outages       longest warehouse %.1fs (%d messages stored during warehouse outages, loads again %.1fs after it at the slowest), "+
		"longest NATS %.1fs, %d replicas restarted by rolling restarts\n",
		r.Faults.LongestWarehouseOutageSeconds, r.Messages.DuringWarehouseOutages, r.Faults.SlowestResumeSeconds,
		r.Faults.LongestNATSOutageSeconds, r.Faults.ReplicasRolled)
	fmt.Fprintf(w, "failovers     %d: %d acknowledged loads lost by the promotions, %d of them in the final ledger; longest outage %.1fs, loads again %.1fs after the promotion at the slowest\n",
		r.Faults.ByKind[FaultFailover], r.Faults.FailoverLostLoads, r.Faults.FailoverLostInLedger,
		r.Faults.LongestFailoverOutageSeconds, r.Faults.SlowestFailoverResumeSeconds)
	v := r.Reverify
	fmt.Fprintf(w, "reverify      %d passes logged by idem (%d unfinished): %d events checked, %d missing: %d reloaded, %d loaded ahead, %d skipped, %d failed\n",
		v.Passes, v.Unfinished, v.Checked, v.Missing, v.Reloaded, v.Ahead, v.Skipped, v.Failed)
	x := r.Exits
	fmt.Fprintf(w, "processes     %d starts, %d killed, %d crash-hook exits, %d failed to start, %d graceful restarts, %d other exits, %d clean final stops\n",
		x.Starts, x.KilledByChaos, x.CrashHook, x.StartupFailure, x.GracefulRestarts, x.Other, x.CleanFinal)
	fmt.Fprintf(w, "audit         %s\n", kinds(r.Audit))
	fmt.Fprintf(w, "tables        equal to reference: %v; lost %d, stale %d, unexpected %d, doubled %d, runs loaded twice %d, loads without rows %d, rows without load %d\n",
		c.TablesEqualReference, c.LostRows, c.StaleRows, c.UnexpectedRows, c.DoubledRows, c.RunsLoadedTwice, c.LoadsWithoutRows, c.RowsWithoutLoad)
	fmt.Fprintf(w, "history       %d delete_insert load-history breaks; reader: %d samples during the run, %d saw a doubled row\n",
		c.ChainBreaks, c.ReadsSampled, c.ReadsSawDoubled)
	fmt.Fprintf(w, "ledger        %d valid events: %d succeeded exactly once, %d not once, %d unaccounted, %d unexpected rows, %d dead-lettered\n",
		c.ValidEvents, c.SucceededOnce, c.SuccessNotOne, c.UnaccountedEvents, c.UnexpectedLedger, c.ValidDeadLettered)
	fmt.Fprintf(w, "dead letters  correct: %v; fatal %d/%d once (missing %d, duplicated %d, wrong reason %d, after >1 delivery %d of which explained %d); "+
		"valid events %d: transient copies %d (excused %d, during outages or deploys %d), judged fatal %d; unknown %d\n",
		c.DLQCorrect, c.FatalDeadLettered, c.FatalInputs, c.FatalMissing, c.FatalDuplicated, c.FatalWrongReason,
		c.FatalRedelivered, c.FatalRedeliveredExpl, c.ValidEventsDeadLettered, c.TransientDeadLtrs, c.TransientExplained,
		c.ValidDeadLetteredInOutage, c.ValidJudgedFatal, c.UnknownDeadLetters)
	fmt.Fprintf(w, "processes     panics %d, drained within bound %v, clean final stops %v\n", c.Panics, c.Drained, c.CleanStops)
	if r.LeastPrivilege {
		fmt.Fprintf(w, "grants        least privilege: %d refusals, a retention pass ran %v\n", c.Refusals, c.RetentionRan)
	}
	if r.Pooler != "" {
		fmt.Fprintf(w, "pooler        %s mode: %d pooler_restart, longest %.1fs down; %d things left on pooled server connections after the final stop\n",
			r.Pooler, r.Faults.ByKind[FaultPoolerRestart], r.Faults.LongestPoolerOutageSeconds, c.PooledLeftovers)
	}
	if s := r.Source; s != nil {
		fmt.Fprintf(w, "pg source     %d partitions, %d events, %d corrections (%d given up); %d promotions, %d standby restarts, %d copies in flight at them, "+
			"replay held %.1fs (%d partitions waited for it, %d checks, %d attempts failed on it); %d loads checked: %d partial, %d torn, %d stale; "+
			"tables equal the source: %v\n",
			s.Partitions, s.Events, s.Corrections, s.CorrectionFails, s.Promotions, s.Restarts, s.CopiesInFlight, s.ReplayHeldSeconds,
			s.LagWaits, s.LagChecks, s.LagAttempts, s.LoadsChecked, s.Partial, s.Torn, s.Stale, s.TablesEqual)
	}
	r.Files.print(w)
	if t := r.Timely; t != nil {
		fmt.Fprintf(w, "timely        %d early partitions (%d waited for their rows, %d loads before them); %d silent corrections, %d recheck reloads; %d pauses (%d failed), %d attempts while paused\n",
			t.EarlyPartitions, t.EarlyWaited, t.EarlyBeforeReady, t.Corrections, t.RecheckReloads, t.Pauses, t.PauseFails, t.LoadsWhilePaused)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note          %s\n", n)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "VIOLATION     %s\n", v)
	}
}

func kinds(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
