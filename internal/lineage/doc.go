// Package lineage builds OpenLineage run events for idem's load attempts and
// sends one to an OpenLineage backend (Marquez, or any server that takes
// POST /api/v1/lineage).
//
// It is plain data and one HTTP call. It never decides whether a load
// happens, never retries (the outbox relay does), and nothing in it may fail
// or slow a load: a parent the event names badly is ignored with a reason,
// a backend that is down is an error for the relay to retry.
//
// # Events
//
// One attempt (one row of idem.pipeline_audit) is one OpenLineage run: a
// START when it begins, then COMPLETE with the rows written, or FAIL with
// the error, or ABORT for an attempt whose process died. [Attempt] builds
// them; the structs ([RunEvent] and its facets) follow the published JSON
// schema (spec 2-0-2) field for field, and the tests validate every event
// against that schema and each facet's own.
//
// The job is <pipeline>.<dataset> ([JobName]) in the configured namespace
// (the pipeline by default). Its jobType facet says BATCH, integration
// "idem", jobType "LOAD".
//
// # Run ids
//
// [RunID] is a name-based UUID (version 5, SHA-1, RFC 9562) of the job
// namespace, the pipeline, the audit row's id and the attempt number. START
// and COMPLETE of one attempt are built in different transactions, and an
// outbox row may be sent any number of times: each computes the same id
// from what the audit row holds, so a retry never makes a new run and the
// two events always pair. The OpenLineage docs recommend UUIDv7; a v7 would
// need the attempt's start time read back exactly at every event, and its
// ordering buys idem nothing, so the id is a v5: the spec requires only a
// UUID. Its name is printable ([RunIDName]), so an operator can recompute it
// with uuid-ossp's uuid_generate_v5 to join a run to its audit row.
//
// # Datasets
//
// The output is the dataset's target and the inputs are the tables its
// source reads, named as OpenLineage's naming spec says for PostgreSQL:
// namespace postgres://{host}:{port}, name {database}.{schema}.{table}
// ([NewWarehouse]). [SourceTables] finds the tables a source reads from the
// planner's EXPLAIN (VERBOSE, FORMAT JSON): views resolve to the tables
// behind them, partitions to their partitioned table, and a table the
// planner does not read (a removed join) is not listed.
//
// # Facets
//
//	parent                  run      the scheduler's run that published the event ([ParentFromAttributes])
//	nominalTime             run      the partition's period (a day or an hour), when it has one
//	errorMessage            run      FAIL: the error, programmingLanguage GO
//	idem_run                run      idem's own: the partition, the event's run_id, the audit id and attempt;
//	                                 on COMPLETE and FAIL, the attempt's schema changes, when it met any
//	jobType                 job      BATCH, idem, LOAD
//	outputStatistics        output   COMPLETE: rowCount, the rows written
//	schema                  output   COMPLETE: the target's columns (name, type, ordinal_position) as the load committed them
//	dataQualityAssertions   output   the checks' outcomes, in the output dataset's facets
//	idem_files              input    COMPLETE of a files dataset: the files read under the partition's prefix
//	                                 (an input named s3://bucket + key, or file + path), each with its identity
//	                                 and rows, and the listing's fingerprint (IdemFilesInputDatasetFacet.json)
//
// The checks' outcomes are assertions (a named test passed or failed, with
// what was expected and found), which is what dataQualityAssertions holds;
// dataQualityMetrics holds measurements (null counts, quantiles per column)
// and requires them, which idem's checks do not produce. The spec defines
// dataQualityAssertions as an input dataset facet, written for a test job
// that reads the dataset it tests; idem tests the rows it has just written,
// so the facet goes in the target's dataset facets (the slot that describes
// the dataset whichever way it is used, where dbt's integration also puts
// it) rather than inventing a read of the target as an input.
//
// The schema facet is what a lineage backend (Marquez, DataHub) shows as
// the dataset's columns: a column that on_schema_change append_new_columns
// added, or one sync_all_columns widened, appears with the COMPLETE of the
// load that made it. The types are PostgreSQL's
// own (format_type), as idem.schema_changes writes them. The columns come
// from the catalog reads the load made in its transaction (read again
// after its DDL), so they cost no statement of their own. START, FAIL and
// ABORT carry none: a START's columns would be the ones before the load,
// and a failed load committed nothing.
//
// idem_run is described by IdemRunFacet.json in this package's folder.
// Its schemaChanges list each difference's column, change, action, old and
// new types and policy; the DDL and a refusal's reason stay in
// idem.schema_changes (idem audit schema) and the FAIL's errorMessage.
//
// # Parent runs
//
// A scheduler links its task to the load through the event's attributes:
//
//	openlineage_parent_id                  namespace/job_name/run_id in one string
//	openlineage_parent_job_namespace       or the three parts apart
//	openlineage_parent_job_name
//	openlineage_parent_run_id
//	openlineage_root_parent_id             the root of the hierarchy (the DAG run), same two forms
//	openlineage_root_parent_job_namespace
//	openlineage_root_parent_job_name
//	openlineage_root_parent_run_id
//
// From Airflow's OpenLineage provider:
//
//	openlineage_parent_id:      {{ macros.OpenLineageProviderPlugin.lineage_parent_id(task_instance) }}
//	openlineage_root_parent_id: {{ macros.OpenLineageProviderPlugin.lineage_root_parent_id(task_instance) }}
//
// or, apart, lineage_job_namespace(), lineage_job_name(task_instance) and
// lineage_run_id(task_instance) for the parent, and lineage_job_namespace(),
// lineage_root_job_name(task_instance) and lineage_root_run_id(task_instance)
// for the root. The one-string form splits on "/" into exactly three parts,
// as dbt-ol reads OPENLINEAGE_PARENT_ID; a namespace or job name holding a
// "/" needs the three attributes. When both forms are given the three
// attributes win. A root without a parent, a run id that is not a UUID, an
// empty, over-long or unprintable part: each is ignored with a reason
// ([Ignored]) for the log, and the load goes on without that facet. With no
// root attribute the facet has no root.
//
// # Sending
//
// [Client.Send] POSTs one event's JSON to {url}/api/v1/lineage (the endpoint
// is configurable) with an optional API key as a Bearer token. An error is a
// [*SendError] whose Fatal says whether to drop the event: a 4xx other than
// 408 and 429 is the backend refusing that event for good; a 5xx, a 408, a
// 429, a timeout or a network error is worth retrying later.
package lineage
