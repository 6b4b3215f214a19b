package chaos

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/localpg"
)

// Defaults of a campaign, sized for the short variant that runs in `make
// test` on a 2-core machine. `make chaos` overrides them through the
// environment (FromEnv).
const (
	DefaultEvents      = 1500
	DefaultDuration    = 150 * time.Second
	DefaultReplicas    = 3
	DefaultPartitions  = 30
	DefaultFatalShare  = 0.03
	DefaultAckWait     = 2 * time.Second
	DefaultMaxInFlight = 4
	DefaultCrashProb   = 0.005
	DefaultSlowLoad    = 80 * time.Millisecond
	DefaultDrainBound  = 2 * time.Minute
	DefaultFaultGapMin = 1 * time.Second
	DefaultFaultGapMax = 4 * time.Second
	// One round of long faults: the warehouse down for WarehouseDownMin to
	// WarehouseDownMax, NATS down for NATSDown, a rolling restart, a
	// failover (failover.go).
	DefaultLongRounds       = 1
	DefaultWarehouseDownMin = 25 * time.Second
	DefaultWarehouseDownMax = 35 * time.Second
	DefaultNATSDown         = 30 * time.Second
)

// The retry settings the harness writes for every dataset: idem's default
// number of retries, and a backoff short enough that the whole schedule
// (retrySchedule, at most 10 s) is a fraction of the shortest warehouse
// outage. A warehouse outage that dead-letters a message proves the circuit
// missing, not the schedule too short.
const (
	Retries       = config.DefaultRetries
	RetryDelay    = 1 * time.Second
	MaxRetryDelay = 4 * time.Second
)

// retrySchedule is the longest a message's retries can wait in all: the
// sum of the longest backoff before each retry, as consumer.Retry.Backoff
// draws it (uniform in [lo, min(2·lo, max)], lo doubling from delay, capped
// at max). plan_test.go checks it against the consumer's own function.
func retrySchedule(retries int, delay, maxDelay time.Duration) time.Duration {
	var total time.Duration
	lo := delay
	for range retries {
		total += min(2*lo, maxDelay)
		lo = min(2*lo, maxDelay)
	}
	return total
}

// Options of one campaign. Zero fields take the defaults above.
type Options struct {
	// Seed drives the workload and the fault schedule. 0 picks one from the
	// clock; the report prints the one used.
	Seed int64
	// Events is the number of distinct events of the fault phase, valid and
	// fatal, not counting copies and the final settle events.
	Events int
	// Duration is the length of the fault phase; events are spread over it.
	Duration time.Duration
	// Replicas is the number of `idem serve` processes.
	Replicas int
	// Partitions per dataset.
	Partitions int
	// FatalShare of Events are fatal inputs (bad bodies, empty partitions).
	FatalShare float64
	// AckWait is the consumer's ack wait; pauses last longer than it.
	AckWait time.Duration
	// MaxInFlight per idem process.
	MaxInFlight int
	// CrashProb is the probability that an idem process exits after a load,
	// between COMMIT and the ack. Negative turns it off.
	CrashProb float64
	// SlowLoad makes each load sleep uniformly in [0, SlowLoad) inside its
	// transaction, so faults catch loads mid-flight. Negative turns it off.
	SlowLoad time.Duration
	// FaultGapMin and FaultGapMax bound the pause between two faults.
	FaultGapMin, FaultGapMax time.Duration
	// DrainBound is how long after the last fault the backlog must be empty.
	DrainBound time.Duration
	// LongRounds is how many rounds of long faults the schedule places,
	// each a warehouse outage, a NATS outage, a rolling restart and a
	// failover to a standby that missed the last commits, in an order the
	// seed draws. Negative turns them off.
	LongRounds int
	// WarehouseDownMin and WarehouseDownMax bound a warehouse outage:
	// PostgreSQL stopped, then started again. The minimum must be at least
	// twice the retry schedule, so the outage outlasts every message's
	// retries.
	WarehouseDownMin, WarehouseDownMax time.Duration
	// NATSDown is how long a NATS outage lasts: the server stopped, then
	// started again on the same port and store.
	NATSDown time.Duration
	// Cluster runs NATS as a cluster of three nats-server processes (child
	// processes of NATSBin) with R3 streams, behind Toxiproxy on the client
	// ports and on the routes, and adds the cluster faults to the schedule.
	// Otherwise NATS is one in-process server.
	Cluster bool
	// PoolMode puts a real pooler between the replicas and PostgreSQL, in
	// that pool mode ("transaction" or "session"): idem, the pooler, the
	// Toxiproxy link, PostgreSQL. Every link fault and failover still acts
	// on the link; the schedule adds pooler_restart. Empty: no pooler.
	// Pooler must be set with it.
	PoolMode string
	// Pooler starts the pooler in front of upstreamURL (a URL to the
	// campaign's database through the Toxiproxy link), in PoolMode. The
	// caller provides it (the test harness starts a real PgBouncer); the
	// campaign stops nothing it returns, but restarts it for pooler_restart.
	Pooler func(upstreamURL string) (Pooler, error)
	// NoFaults runs the workload without the nemesis and the crash hook: the
	// control run.
	NoFaults bool
	// ExtraWeight, when set, is the weight of each kind of
	// extraFaultWeights that Kinds names, beside the others' own: how often
	// a long campaign draws them among the cluster's faults.
	ExtraWeight int
	// Timely adds a world that moves on its own (timely.go): a dataset
	// whose events come before their rows (ready_when), one whose rows are
	// corrected with no event (recheck), and an operator pausing a busy
	// dataset for a few seconds, again and again.
	Timely bool
	// LeastPrivilege runs the replicas as the role deploy/postgres/
	// grants.sql makes (GrantsPath), with the campaign's own sources and
	// targets granted as its examples grant theirs; migrate and streams run
	// as the administrator. Any refusal in the replicas' logs, and a phase
	// long enough for a retention pass without one, is a violation.
	LeastPrivilege bool
	// GrantsPath is deploy/postgres/grants.sql. Required with
	// LeastPrivilege.
	GrantsPath string
	// Kinds, when set, are the only short faults the schedule draws, each
	// with its weight from the tables of faults.go (1 if it has none): a
	// focused campaign for one fault kind or a few. Set LongRounds to -1
	// to leave the long faults out too.
	Kinds []string
	// EveryKind makes a short campaign inject every kind its schedule
	// holds whatever the machine's pace: on a busy machine heals outlast
	// their plan, so a nemesis behind its schedule passes over a fault of
	// a kind already injected while a kind not yet injected is still to
	// come, and goes on past Duration (up to twice it) until each has run.
	EveryKind bool
	// Second, when set, are kinds of Kinds that a second nemesis draws, at
	// the same time as the first, which draws the others: one schedule runs
	// one fault at a time, and the slow heals of the sources' and the
	// site's faults leave the processes' own faults rare. The second
	// schedule has no long faults. A site crash and a rolling restart wait
	// for the other nemesis's fault to end, and it for them.
	Second []string
	// SecondWeight, when set, is the second schedule's ExtraWeight.
	SecondWeight int
	// Downstream adds a dataset that `then:` runs after every load of
	// replace (faults_jsfull.go), so the relay publishes downstream events
	// into the events stream; the checker matches them with the upstream
	// loads. Kinds naming js_storage_full turns it on too.
	Downstream bool
	// PGSource adds a PostgreSQL source (pgsource.go): a second PostgreSQL
	// with a streaming standby, two datasets whose `postgres:` source reads
	// it, corrections of its rows during the phase, and the checks that
	// hold every load and the final tables to it. replica_source_failover
	// needs it.
	PGSource bool
	// Files adds the file datasets (files.go): a real versitygw (S3Bin)
	// behind the harness's error proxy and a Toxiproxy link, one watched
	// dataset per file format, partitions landing and corrected during the
	// phase. The object-store faults need it.
	Files bool

	// Bin is the idem binary, built with -tags idemtest. Required.
	Bin string
	// NATSBin is a nats-server binary. Required with Cluster.
	NATSBin string
	// NATSStore is where the cluster's servers keep their JetStream
	// stores; when empty, a directory of its own on /dev/shm, or under Dir
	// (natsStoreDir).
	NATSStore string
	// S3Bin is a versitygw binary. Required with Files.
	S3Bin string
	// PG is the cluster the campaign may restart at will. Required: it must
	// be one the caller started for this purpose.
	PG *localpg.Server
	// Dir holds the NATS store, the config and every process's log.
	// Required.
	Dir string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// WithDefaults returns o with zero fields set to the defaults.
func (o Options) WithDefaults() Options {
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000_000
	}
	setInt(&o.Events, DefaultEvents)
	setDur(&o.Duration, DefaultDuration)
	setInt(&o.Replicas, DefaultReplicas)
	setInt(&o.Partitions, DefaultPartitions)
	if o.FatalShare == 0 {
		o.FatalShare = DefaultFatalShare
	}
	setDur(&o.AckWait, DefaultAckWait)
	setInt(&o.MaxInFlight, DefaultMaxInFlight)
	if o.CrashProb == 0 {
		o.CrashProb = DefaultCrashProb
	}
	if o.SlowLoad == 0 {
		o.SlowLoad = DefaultSlowLoad
	}
	setDur(&o.FaultGapMin, DefaultFaultGapMin)
	setDur(&o.FaultGapMax, DefaultFaultGapMax)
	setDur(&o.DrainBound, DefaultDrainBound)
	setInt(&o.LongRounds, DefaultLongRounds)
	setDur(&o.WarehouseDownMin, DefaultWarehouseDownMin)
	setDur(&o.WarehouseDownMax, max(DefaultWarehouseDownMax, o.WarehouseDownMin))
	setDur(&o.NATSDown, DefaultNATSDown)
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// Validate names every field that cannot work.
func (o Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("chaos: "+format, args...)) }
	if o.Bin == "" {
		add("Bin is required: build idem with -tags idemtest")
	}
	if o.Cluster && o.NATSBin == "" {
		add("NATSBin is required with Cluster: build github.com/nats-io/nats-server/v2")
	}
	if o.Files && o.S3Bin == "" {
		add("S3Bin is required with Files: a versitygw binary (testkit/s3test.Binary)")
	}
	if !o.Files && slices.ContainsFunc(o.Kinds, func(k string) bool { return slices.Contains(objstoreKinds, k) }) {
		add("Kinds: %v", errNoFiles)
	}
	if o.PG == nil {
		add("PG is required: a cluster started for the campaign, which it restarts")
	}
	if o.Dir == "" {
		add("Dir is required")
	}
	switch o.PoolMode {
	case "", PoolTransaction, PoolSession:
	default:
		add("PoolMode %q: use %q or %q, or leave it empty for no pooler", o.PoolMode, PoolTransaction, PoolSession)
	}
	if o.PoolMode != "" && o.Pooler == nil {
		add("Pooler is required with PoolMode %q: a function that starts the pooler in front of the URL it is given", o.PoolMode)
	}
	if o.LeastPrivilege && o.GrantsPath == "" {
		add("GrantsPath is required with LeastPrivilege: deploy/postgres/grants.sql")
	}
	if o.LeastPrivilege && o.PoolMode != "" {
		add("LeastPrivilege with PoolMode: the pooler logs in as the administrator; use one or the other")
	}
	for _, k := range o.Kinds {
		if !knownKind(k) {
			add("Kinds: %q is no fault kind of the schedule", k)
		}
	}
	for _, k := range o.Second {
		if !slices.Contains(o.Kinds, k) {
			add("Second: %q is not one of Kinds", k)
		}
		if k == FaultSiteCrash || k == FaultRollingRestart {
			add("Second: %q stops every process: only the first nemesis draws it", k)
		}
	}
	if len(o.Second) > 0 && len(o.Second) == len(o.Kinds) {
		add("Second: every kind of Kinds; leave some to the first nemesis")
	}
	if slices.Contains(o.Kinds, FaultSourceFailover) && !o.PGSource {
		add("Kinds: %q needs PGSource", FaultSourceFailover)
	}
	errs = append(errs, o.validateSiteKinds()...)
	if o.Replicas < 1 || o.Replicas > 9 {
		add("Replicas %d: use 1 to 9", o.Replicas)
	}
	if o.Partitions < 1 || o.Partitions > 900 {
		add("Partitions %d: use 1 to 900", o.Partitions)
	}
	if o.FatalShare < 0 || o.FatalShare >= 1 {
		add("FatalShare %g: use a share in [0, 1)", o.FatalShare)
	}
	if o.AckWait < time.Second {
		add("AckWait %s: idem needs at least 1s", o.AckWait)
	}
	if o.FaultGapMax < o.FaultGapMin {
		add("FaultGapMax %s is under FaultGapMin %s", o.FaultGapMax, o.FaultGapMin)
	}
	if o.LongRounds > 0 {
		sched := retrySchedule(Retries, RetryDelay, MaxRetryDelay)
		if o.WarehouseDownMin < 2*sched {
			add("WarehouseDownMin %s: use at least %s, twice the retry schedule, so the outage outlasts every message's retries",
				o.WarehouseDownMin, 2*sched)
		}
		if o.WarehouseDownMax < o.WarehouseDownMin {
			add("WarehouseDownMax %s is under WarehouseDownMin %s", o.WarehouseDownMax, o.WarehouseDownMin)
		}
		if o.NATSDown <= 0 {
			add("NATSDown %s: use a positive duration such as 30s", o.NATSDown)
		}
		if long := time.Duration(o.LongRounds) * o.longRoundMax(); long > o.Duration*3/4 {
			add("Duration %s: %d rounds of long faults may take %s, over three quarters of it; raise Duration or lower LongRounds",
				o.Duration, o.LongRounds, long)
		}
	}
	return errors.Join(errs...)
}

// pooled says the replicas reach PostgreSQL through a pooler.
func (o Options) pooled() bool { return o.PoolMode != "" }

// streamReplicas is the replicas of the streams idem creates: one per
// server of the topology.
func (o Options) streamReplicas() int {
	if o.Cluster {
		return clusterSize
	}
	return 1
}

// longRoundMax is the most one round of long faults can take, as the
// schedule plans it.
func (o Options) longRoundMax() time.Duration {
	return o.WarehouseDownMax + resumeAllowance + o.NATSDown + rollingRestartPlan(o.Replicas) + failoverLagMax + failoverPlan
}

// FromEnv reads the knobs of `make chaos` over o: CHAOS_SEED, CHAOS_EVENTS,
// CHAOS_DURATION, CHAOS_REPLICAS, CHAOS_PARTITIONS, CHAOS_MAX_IN_FLIGHT, CHAOS_CRASH_PROB,
// CHAOS_DRAIN_BOUND, CHAOS_LONG_ROUNDS, CHAOS_WAREHOUSE_DOWN_MIN,
// CHAOS_WAREHOUSE_DOWN_MAX, CHAOS_NATS_DOWN, CHAOS_POOLER=transaction (or
// session: the replicas behind a real pooler in that mode, which the caller
// starts through Options.Pooler), and CHAOS_NO_FAULTS=1 for a control run
// without faults.
// An unreadable value is an error naming the variable.
func FromEnv(o Options) (Options, error) {
	var errs []error
	num := func(name string, set func(int64)) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: want an integer", name, v))
				return
			}
			set(n)
		}
	}
	dur := func(name string, d *time.Duration) {
		if v := os.Getenv(name); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: want a duration such as 90s or 25m", name, v))
				return
			}
			*d = x
		}
	}
	num("CHAOS_SEED", func(n int64) { o.Seed = n })
	num("CHAOS_EVENTS", func(n int64) { o.Events = int(n) })
	num("CHAOS_REPLICAS", func(n int64) { o.Replicas = int(n) })
	num("CHAOS_PARTITIONS", func(n int64) { o.Partitions = int(n) })
	num("CHAOS_MAX_IN_FLIGHT", func(n int64) { o.MaxInFlight = int(n) })
	dur("CHAOS_DURATION", &o.Duration)
	dur("CHAOS_DRAIN_BOUND", &o.DrainBound)
	num("CHAOS_LONG_ROUNDS", func(n int64) { o.LongRounds = int(n) })
	dur("CHAOS_WAREHOUSE_DOWN_MIN", &o.WarehouseDownMin)
	dur("CHAOS_WAREHOUSE_DOWN_MAX", &o.WarehouseDownMax)
	dur("CHAOS_NATS_DOWN", &o.NATSDown)
	if v := os.Getenv("CHAOS_CRASH_PROB"); v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("CHAOS_CRASH_PROB=%q: want a probability such as 0.005", v))
		} else {
			o.CrashProb = p
		}
	}
	if v := os.Getenv("CHAOS_POOLER"); v != "" {
		if v != PoolTransaction && v != PoolSession {
			errs = append(errs, fmt.Errorf("CHAOS_POOLER=%q: want %q or %q", v, PoolTransaction, PoolSession))
		} else {
			o.PoolMode = v
		}
	}
	if os.Getenv("CHAOS_NO_FAULTS") == "1" {
		o.NoFaults = true
	}
	return o, errors.Join(errs...)
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

func setDur(p *time.Duration, def time.Duration) {
	if *p == 0 {
		*p = def
	}
}

// split is the options of the two schedules: the first draws the kinds
// of Kinds that Second does not name, with the long faults; the second
// draws those of Second alone. Without Second, the first is o.
func (o Options) split() (first, second Options) {
	if len(o.Second) == 0 {
		return o, o
	}
	first, second = o, o
	first.Kinds = slices.DeleteFunc(slices.Clone(o.Kinds), func(k string) bool { return slices.Contains(o.Second, k) })
	second.Kinds, second.LongRounds = slices.Clone(o.Second), -1
	if o.SecondWeight > 0 {
		second.ExtraWeight = o.SecondWeight
	}
	return first, second
}
