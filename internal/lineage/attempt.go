package lineage

import (
	"slices"
	"time"

	"github.com/idem-data/idem/schemas"
)

// Attempt is one load attempt as lineage sees it: everything its events
// share, and what its load found for the event that ends it. Build it from
// the audit row, the dataset's config and the load's plan; its methods make
// the events.
type Attempt struct {
	// Namespace is the job namespace (the config's lineage namespace).
	Namespace string
	// Producer is the URI the events name as their producer; empty means
	// DefaultProducer.
	Producer string
	// Pipeline and Dataset are the audit row's dag_id and task_id.
	Pipeline, Dataset string
	// AuditID and Number are the audit row's id and attempt.
	AuditID int64
	Number  int
	// Partition is the partition loaded; a date or an hour gives the run
	// its nominal time.
	Partition schemas.Partition
	// EventRunID is the event's run_id.
	EventRunID string
	// Parent is the scheduler's run, from ParentFromAttributes; nil for none.
	Parent *Parent
	// Inputs are the tables the source reads; Output is the target.
	Inputs []InputDataset
	// Files, for a dataset whose source is files, is the partition's
	// prefix the load read and the files it read there: an input of the
	// COMPLETE, with its idem_files facet (nil: none).
	Files  *FilesRead
	Output Dataset
	// OutputColumns are the target's columns as the load committed them,
	// the output's schema facet on COMPLETE (nil: none known). A FAIL
	// carries none: its load committed nothing, and the columns its plan
	// knew may include one it added and rolled back.
	OutputColumns []SchemaField
	// SchemaChanges are the differences the load met between its source's
	// columns and its target's, and what it did with each, in the idem_run
	// facet of COMPLETE and FAIL (nil: none). A START says how the attempt
	// began, before its load met them.
	SchemaChanges []SchemaChange
}

// RunID is the attempt's run id (see RunID).
func (a Attempt) RunID() string { return RunID(a.Namespace, a.Pipeline, a.AuditID, a.Number) }

// Start is the event of the attempt beginning at t.
func (a Attempt) Start(t time.Time) RunEvent {
	return a.event(Start, t, a.outputs(nil, nil, nil))
}

// Complete is the event of the attempt's commit at t, having written rows
// rows, with its checks' outcomes (none for a dataset without checks), the
// target's columns and the schema changes the load made or met.
func (a Attempt) Complete(t time.Time, rows int64, checks []Assertion) RunEvent {
	return a.event(Complete, t, a.outputs(OutputStatistics(a.producer(), rows), checks, a.OutputColumns))
}

// Fail is the event of the attempt failing at t with message; checks are
// the outcomes of the checks that refused the load, if that was why, and
// SchemaChanges the changes its on_schema_change refused, if that was.
func (a Attempt) Fail(t time.Time, message string, checks []Assertion) RunEvent {
	e := a.event(Fail, t, a.outputs(nil, checks, nil))
	e.Run.Facets.ErrorMessage = ErrorMessage(a.producer(), message)
	return e
}

// Abort is the event of an attempt found dead at t: its process stopped
// before it could say how the load ended, and nothing it did committed.
func (a Attempt) Abort(t time.Time) RunEvent {
	return a.event(Abort, t, a.outputs(nil, nil, nil))
}

func (a Attempt) producer() string {
	if a.Producer == "" {
		return DefaultProducer
	}
	return a.Producer
}

func (a Attempt) outputs(stats *OutputStatisticsOutputDatasetFacet, checks []Assertion, columns []SchemaField) []OutputDataset {
	return []OutputDataset{{
		Dataset: a.Output,
		Facets: DatasetFacets{
			Schema:                Schema(a.producer(), columns),
			DataQualityAssertions: DataQualityAssertions(a.producer(), checks),
		},
		OutputFacets: OutputDatasetFacets{OutputStatistics: stats},
	}}
}

func (a Attempt) event(typ EventType, t time.Time, outputs []OutputDataset) RunEvent {
	p := a.producer()
	var changes []SchemaChange
	if typ == Complete || typ == Fail {
		changes = a.SchemaChanges
	}
	return RunEvent{
		EventType: typ,
		EventTime: t.UTC(),
		Producer:  p,
		SchemaURL: RunEventSchemaURL,
		Run: Run{
			RunID: a.RunID(),
			Facets: RunFacets{
				Parent:      a.Parent.Facet(p),
				NominalTime: NominalTime(p, a.Partition),
				Idem: &IdemRunFacet{
					BaseFacet:     BaseFacet{p, IdemRunFacetSchemaURL},
					Partition:     a.Partition.Key,
					RunID:         a.EventRunID,
					AuditID:       a.AuditID,
					Attempt:       a.Number,
					SchemaChanges: changes,
				},
			},
		},
		Job: Job{
			Namespace: a.Namespace,
			Name:      JobName(a.Pipeline, a.Dataset),
			Facets:    JobFacets{JobType: LoadJobType(p)},
		},
		Inputs:  a.inputs(typ),
		Outputs: outputs,
	}
}

// FilesRead is the files a load read under one prefix.
type FilesRead struct {
	// Prefix is the partition's prefix, s3://bucket/key/ or file:///path/.
	Prefix      string
	Fingerprint string
	Files       []IdemFile
}

// inputs are the source's tables, and on COMPLETE the files the load read
// as one more input: the partition's prefix, named as OpenLineage names
// object storage (namespace s3://bucket, name the key) and local files
// (namespace file, name the path).
func (a Attempt) inputs(typ EventType) []InputDataset {
	if a.Files == nil || typ != Complete {
		return a.Inputs
	}
	in := InputDataset{Dataset: FilesDataset(a.Files.Prefix), InputFacets: InputDatasetFacets{Files: &IdemFilesInputDatasetFacet{
		BaseFacet: BaseFacet{a.producer(), IdemFilesSchemaURL}, Fingerprint: a.Files.Fingerprint, Files: a.Files.Files}}}
	return append(slices.Clip(a.Inputs), in)
}
