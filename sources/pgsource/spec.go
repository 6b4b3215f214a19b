package pgsource

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/internal/sqlcheck"
)

// Defaults and bounds of a Spec.
const (
	// DefaultRecoveryConflictRetries is how often Copy runs the source query
	// again after a recovery conflict on a standby, when the Spec says 0.
	DefaultRecoveryConflictRetries = 3
	// NoRecoveryConflictRetries in Spec.RecoveryConflictRetries makes the
	// first recovery conflict final.
	NoRecoveryConflictRetries = -1
	// MaxRecoveryConflictRetries bounds Spec.RecoveryConflictRetries: each
	// retry reads the whole partition again while the load's transaction
	// stays open on the warehouse.
	MaxRecoveryConflictRetries = 10
	// DefaultConnectTimeout bounds a connection to the source when its URL
	// sets no connect_timeout.
	DefaultConnectTimeout = 10 * time.Second
)

// Params are the values a source query binds: @partition and @run_id.
type Params struct {
	Partition string // the event's canonical partition key, e.g. 2026-11-28
	RunID     string
}

// Spec is one PostgreSQL source: where it is, what it reads for a partition,
// and how fresh a standby must be. The caller builds it from its
// configuration; this package never reads configuration itself.
type Spec struct {
	// URL is a postgres:// (or postgresql://) URL of the source database,
	// often a streaming standby. It may hold a password, which this package
	// never logs nor puts in an error: errors name the source by Addr.
	URL string
	// SQL is one SELECT (or WITH ... SELECT) returning the partition's rows in
	// the target's column order. It may use @partition and @run_id, bound as
	// quoted literals (see Bind). It must not read the wall clock, write, or
	// hold a second statement.
	SQL string
	// MaxReplicaLag, when positive, turns a standby whose replay is behind
	// by more than this into a wait (*LagError) instead of a load of stale
	// rows. 0 means no gate. A primary never lags.
	MaxReplicaLag time.Duration
	// RecoveryConflictRetries is how many times a query that a standby's
	// replay cancelled (a recovery conflict) runs again inside Copy, from a
	// savepoint of the load's transaction. 0 means
	// DefaultRecoveryConflictRetries, NoRecoveryConflictRetries none; at most
	// MaxRecoveryConflictRetries.
	RecoveryConflictRetries int
}

// WithDefaults returns s with every zero field that has a default filled.
func (s Spec) WithDefaults() Spec {
	if s.RecoveryConflictRetries == 0 {
		s.RecoveryConflictRetries = DefaultRecoveryConflictRetries
	}
	return s
}

// retries is the number of retries s allows after a recovery conflict.
func (s Spec) retries() int {
	return max(s.WithDefaults().RecoveryConflictRetries, 0)
}

// Addr names the source without its credentials, for logs and errors:
// host:port/database, "(+N fallback hosts)" when the URL lists several, or
// "(unparsable url)".
func (s Spec) Addr() string {
	cfg, err := pgconn.ParseConfig(s.URL)
	if err != nil {
		return "(unparsable url)"
	}
	return addrOf(cfg)
}

func addrOf(cfg *pgconn.Config) string {
	a := cfg.Host
	if strings.HasPrefix(a, "/") {
		a = "unix:" + a
	}
	a += ":" + strconv.Itoa(int(cfg.Port)) + "/" + cfg.Database
	// Fallbacks repeat a host once per TLS mode tried; count hosts.
	others := map[string]bool{}
	for _, f := range cfg.Fallbacks {
		if f.Host != cfg.Host || f.Port != cfg.Port {
			others[f.Host+":"+strconv.Itoa(int(f.Port))] = true
		}
	}
	if len(others) > 0 {
		a += fmt.Sprintf(" (+%d fallback hosts)", len(others))
	}
	return a
}

// SpecError is one thing wrong with a Spec. Retrying cannot fix it.
type SpecError struct {
	Field   string // url, sql, max_replica_lag, recovery_conflict_retries; target (Copy); fingerprint (Fingerprint)
	Problem string // what is wrong and the fix; never holds a password
	reason  string
}

func (e *SpecError) Error() string { return "pgsource: " + e.Field + ": " + e.Problem }

// Fatal reports true: the same Spec fails the same way every time.
func (e *SpecError) Fatal() bool { return true }

// FatalReason is ReasonWallClockSQL for SQL that reads the clock,
// ReasonSourceConfig otherwise.
func (e *SpecError) FatalReason() string { return e.reason }

// Validate reports every problem of s, each a *SpecError naming its field
// (joined with errors.Join), or nil. Copy and Fingerprint validate too.
func (s Spec) Validate() error {
	var errs []error
	add := func(field, reason, format string, args ...any) {
		errs = append(errs, &SpecError{Field: field, Problem: fmt.Sprintf(format, args...), reason: reason})
	}
	if p := validateURL(s.URL); p != "" {
		add("url", ReasonSourceConfig, "%s", p)
	}
	for _, p := range checkSQL(s.SQL, "the partition's rows") {
		add("sql", p.reason, "%s", p.text)
	}
	if s.MaxReplicaLag < 0 {
		add("max_replica_lag", ReasonSourceConfig, "%s is negative; use 0 for no gate or a positive duration such as 5m", s.MaxReplicaLag)
	}
	switch r := s.RecoveryConflictRetries; {
	case r < NoRecoveryConflictRetries:
		add("recovery_conflict_retries", ReasonSourceConfig, "%d; use %d for none, 0 for the default (%d), or up to %d",
			r, NoRecoveryConflictRetries, DefaultRecoveryConflictRetries, MaxRecoveryConflictRetries)
	case r > MaxRecoveryConflictRetries:
		add("recovery_conflict_retries", ReasonSourceConfig, "%d is more than %d; each retry reads the partition again while the load's transaction waits: "+
			"set hot_standby_feedback = on on the standby instead", r, MaxRecoveryConflictRetries)
	}
	return errors.Join(errs...)
}

// validateURL returns what is wrong with u, in words that never repeat it
// (a URL that does not parse may still hold a password somewhere), or "".
func validateURL(u string) string {
	if strings.TrimSpace(u) == "" {
		return "required; the source database's postgres:// URL"
	}
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return "is not a postgres:// or postgresql:// URL (the URL is not repeated here, as it may hold a password)"
	}
	cfg, err := pgconn.ParseConfig(u)
	if err != nil {
		problem := parseProblem(err)
		if parsed, err := url.Parse(u); err == nil {
			problem = scrub(problem, parsed.User)
		}
		return "PostgreSQL cannot use this URL: " + problem
	}
	if cfg.Database == "" {
		return "names no database; end the URL with /dbname"
	}
	return ""
}

// parseProblem is what pgconn found wrong with a URL, without the URL: the
// words after the URL that pgconn quotes between backticks, unless they
// look like they hold a URL themselves.
func parseProblem(err error) string {
	const generic = "invalid connection settings"
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return generic
	}
	text := pe.Error()
	i := strings.LastIndex(text, "`: ")
	if i < 0 {
		return generic
	}
	text = text[i+3:]
	if strings.Contains(text, "://") || strings.Contains(text, "@") || strings.Contains(text, "password") {
		return generic
	}
	return text
}

// scrub removes a URL's password from text, plainly and URL-escaped.
func scrub(text string, user *url.Userinfo) string {
	if user == nil {
		return text
	}
	pw, ok := user.Password()
	if !ok {
		return text
	}
	return scrubSecret(text, pw)
}

func scrubSecret(text, secret string) string {
	if secret == "" {
		return text
	}
	for _, s := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret)} {
		text = strings.ReplaceAll(text, s, "xxxxx")
	}
	return text
}

type problem struct{ reason, text string }

// checkSQL lists what makes sql unfit to run on the source for what: not
// one SELECT, writes, reads the wall clock, binds an argument idem does not
// have, or places an argument where pgx and sqlcheck read it differently.
func checkSQL(sql, what string) []problem {
	var out []problem
	add := func(reason, format string, args ...any) {
		out = append(out, problem{reason, fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(sql) == "" {
		add(ReasonSourceConfig, "required; write the SELECT that returns %s, filtered with @partition", what)
		return out
	}
	if !utf8.ValidString(sql) {
		add(ReasonSourceConfig, "is not valid UTF-8")
		return out
	}
	for _, f := range sqlcheck.WallClock(sql) {
		add(ReasonWallClockSQL, "reads the wall clock with %s (byte %d), so a rerun or backfill of an old partition would read different rows; use @partition instead", f.Name, f.Offset)
	}
	if !sqlcheck.StartsWithSelect(sql) {
		add(ReasonSourceConfig, "must be a SELECT (or WITH ... SELECT): it runs as COPY (sql) TO STDOUT")
	}
	for _, f := range sqlcheck.NotARead(sql) {
		add(ReasonSourceConfig, "%s (byte %d): a source only reads, in one statement", f.Name, f.Offset)
	}
	params := sqlcheck.Params(sql)
	seen := map[string]bool{}
	for _, p := range params {
		seen[p] = true
		if p != "partition" && p != "run_id" {
			add(ReasonSourceConfig, "uses @%s, which idem does not bind; idem binds only @partition and @run_id", p)
		}
	}
	// Bind substitutes where pgx's lexer finds @name; the checks above
	// read sqlcheck's. Where they disagree, refuse rather than guess.
	bound := map[string]bool{}
	for _, name := range pgxParams(sql) {
		bound[name] = true
		if !seen[name] {
			add(ReasonSourceConfig, "@%s stands where it could also be read as an operator (as in x<@%s or x@%s): put a space before the @", name, name, name)
		}
	}
	for _, name := range params {
		if !bound[name] {
			add(ReasonSourceConfig, "@%s stands where pgx would not bind it; keep @%s out of strings, comments and quoted names", name, name)
		}
	}
	return out
}
