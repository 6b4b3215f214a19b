package lineage

import (
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// JobName is the OpenLineage job of a dataset's loads: <pipeline>.<dataset>,
// as Airflow names a task <dag_id>.<task_id> (the audit table's dag_id and
// task_id).
func JobName(pipeline, dataset string) string { return pipeline + "." + dataset }

// Warehouse is the PostgreSQL database datasets live in, named as
// OpenLineage's naming spec writes it.
type Warehouse struct {
	// Namespace is postgres://{host}:{port}.
	Namespace string
	// Database is the database's name, the first part of a dataset's name.
	Database string
}

// NewWarehouse names the database cfg connects to: the first host (a
// multi-host URL's fallbacks are the same database) in lower case, IPv6 in
// brackets, a Unix socket as localhost, since a socket names no host other
// machines could use. The database defaults to the user's name, as
// PostgreSQL does.
func NewWarehouse(cfg *pgconn.Config) Warehouse {
	host := strings.ToLower(cfg.Host)
	if host == "" || strings.HasPrefix(host, "/") {
		host = "localhost"
	}
	port := cfg.Port
	if port == 0 {
		port = 5432
	}
	db := cfg.Database
	if db == "" {
		db = cfg.User
	}
	return Warehouse{
		Namespace: "postgres://" + net.JoinHostPort(host, strconv.Itoa(int(port))),
		Database:  db,
	}
}

// Dataset is the dataset of table, written schema.table (a bare table is
// in public): name {database}.{schema}.{table}.
func (w Warehouse) Dataset(table string) Dataset {
	schema, name, ok := strings.Cut(table, ".")
	if !ok {
		schema, name = "public", table
	}
	return Dataset{Namespace: w.Namespace, Name: w.Database + "." + schema + "." + name}
}

// Inputs are the input datasets of tables (schema.table each), sorted and
// without duplicates.
func (w Warehouse) Inputs(tables []string) []InputDataset {
	names := make([]string, 0, len(tables))
	for _, t := range tables {
		names = append(names, w.Dataset(t).Name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]InputDataset, len(names))
	for i, n := range names {
		out[i] = InputDataset{Dataset: Dataset{Namespace: w.Namespace, Name: n}}
	}
	return out
}

// FilesDataset names a prefix of files: s3://bucket/key/ is namespace
// s3://bucket and name key/, file:///path/ is namespace file and name
// /path/, as OpenLineage's naming convention has them.
func FilesDataset(prefix string) Dataset {
	if rest, ok := strings.CutPrefix(prefix, "s3://"); ok {
		bucket, key, _ := strings.Cut(rest, "/")
		return Dataset{Namespace: "s3://" + bucket, Name: key}
	}
	return Dataset{Namespace: "file", Name: strings.TrimPrefix(prefix, "file://")}
}
