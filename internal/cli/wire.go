package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// loadConfig reads and completes the config file; validation is the caller's.
func (e *env) loadConfig() (*config.Config, error) {
	cfg, err := config.Load(e.configPath, e.getenv)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config file %s not found: pass --config or set IDEM_CONFIG", e.configPath)
	}
	return cfg, err
}

// databaseURL is the Postgres URL from the config, or the environment alone
// when there is no config file (idem migrate needs nothing else).
func (e *env) databaseURL() (string, error) {
	cfg, err := config.Load(e.configPath, e.getenv)
	switch {
	case err == nil && cfg.Postgres.URL != "":
		return cfg.Postgres.URL, nil
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if u := e.getenv("IDEM_DATABASE_URL"); u != "" {
			return u, nil
		}
		return "", errors.New("no database: set postgres.url in the config or IDEM_DATABASE_URL")
	default:
		return "", err
	}
}

// connect opens a pool and checks the server answers within 10 s.
func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return connectSized(ctx, url, 0)
}

// defaultConnectTimeout bounds a new connection when the URL sets none.
const defaultConnectTimeout = 10 * time.Second

// connectSized opens a pool of at least conns connections (unless the URL
// sets pool_max_conns): a service that runs max_in_flight loads at once needs
// one connection per load, plus the relay's and a health check's.
func connectSized(ctx context.Context, url string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, handlers.Classify(err)
	}
	if conns > 0 && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(max(int(cfg.MaxConns), conns))
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "idem"
	// A server that does not answer (a blackholed address, a failover in
	// progress) must fail the connect, so the warehouse circuit opens, rather
	// than hang a load forever. connect_timeout in the URL overrides it.
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	// Bookkeeping (the `started` row, failures, skips, outbox marks) commits
	// without waiting for the WAL flush; every load transaction sets
	// synchronous_commit back on, and its flush covers the earlier rows too.
	// A server crash can therefore lose only the trace of an attempt that had
	// not committed anything.
	if _, set := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; !set {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// datasets builds the handler's datasets from a validated config.
func datasets(cfg *config.Config) (map[string]*handlers.Dataset, error) {
	out := make(map[string]*handlers.Dataset, len(cfg.Datasets))
	for name, d := range cfg.Datasets {
		ts, tn := d.TargetTable()
		vs, vn := d.ViewName()
		spec := strategies.Spec{
			Dataset:         name,
			Target:          strategies.Table{Schema: ts, Name: tn},
			Source:          d.Source,
			PartitionColumn: d.PartitionColumn,
			Key:             d.Key,
			VersionColumn:   d.VersionColumn,
			View:            strategies.Table{Schema: vs, Name: vn},
			RunIDColumn:     d.RunIDColumn,
			LoadSeqColumn:   d.LoadSeqColumn,
			AllowEmpty:      d.AllowEmpty,

			TruncatePartition: d.TruncatePartition,
		}
		st, err := strategies.New(string(d.Strategy), spec)
		if err != nil {
			return nil, fmt.Errorf("dataset %q: %w", name, err)
		}
		out[name] = &handlers.Dataset{Name: name, PartitionType: d.PartitionType, Strategy: st, Timeout: d.Timeout.Std(), Then: d.Then}
	}
	for name, ds := range out {
		ds.Upstreams = cfg.Upstreams(name)
	}
	return out, nil
}

// samplePartition is a partition key of the dataset's type, used to plan a
// load in `idem validate` without reading the clock.
func samplePartition(t schemas.PartitionType) string {
	switch t {
	case schemas.PartitionHour:
		return "2000-01-01T00:00:00Z"
	case schemas.PartitionText:
		return "idem-validate"
	}
	return "2000-01-01"
}

// configVersion names what a config makes idem do: a hash of the pipeline
// and the datasets, the same on every replica that runs the same datasets,
// whatever the secrets, URLs or comments.
func configVersion(cfg *config.Config) string {
	b, err := json.Marshal(struct {
		Pipeline string
		Datasets map[string]*config.Dataset
	}{cfg.Pipeline, cfg.Datasets})
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// replicaName names this process in the fleet: host and pid.
func replicaName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}
