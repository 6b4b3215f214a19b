package lineage

import (
	"time"

	"github.com/idem-data/idem/schemas"
)

// Schema URLs of the facets, each the version of the facet's schema the
// struct follows (testkit/lineagetest/testdata/openlineage holds those files).
const (
	facetBase                      = "https://openlineage.io/spec/facets/"
	ParentRunFacetSchemaURL        = facetBase + "1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet"
	NominalTimeRunFacetSchemaURL   = facetBase + "1-0-1/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet"
	ErrorMessageRunFacetSchemaURL  = facetBase + "1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet"
	JobTypeJobFacetSchemaURL       = facetBase + "2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet"
	OutputStatisticsSchemaURL      = facetBase + "1-0-2/OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet"
	DataQualityAssertionsSchemaURL = facetBase + "1-1-0/DataQualityAssertionsDatasetFacet.json#/$defs/DataQualityAssertionsDatasetFacet"
	SchemaDatasetFacetSchemaURL    = facetBase + "1-2-0/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet"
	// IdemRunFacetSchemaURL is idem's own run facet (IdemRunFacet.json in
	// this package's folder).
	IdemRunFacetSchemaURL = "https://idem.dev/schemas/openlineage/1-1-0/IdemRunFacet.json#/$defs/IdemRunFacet"
	// IdemFilesSchemaURL is idem's input facet of the files a load read
	// (IdemFilesInputDatasetFacet.json in this package's folder).
	IdemFilesSchemaURL = "https://idem.dev/schemas/openlineage/1-0-0/IdemFilesInputDatasetFacet.json#/$defs/IdemFilesInputDatasetFacet"
)

// BaseFacet is what every facet carries: who produced it and the schema it
// follows.
type BaseFacet struct {
	Producer  string `json:"_producer"`
	SchemaURL string `json:"_schemaURL"`
}

// ParentRunFacet links a run to the run that spawned it (a scheduler's
// task) and, optionally, to the root of that hierarchy (the DAG run).
type ParentRunFacet struct {
	BaseFacet
	Run  ParentRun   `json:"run"`
	Job  ParentJob   `json:"job"`
	Root *ParentRoot `json:"root,omitempty"`
}

// ParentRun is a run elsewhere, by id.
type ParentRun struct {
	RunID string `json:"runId"`
}

// ParentJob is a job elsewhere, by namespace and name.
type ParentJob struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ParentRoot is the root run of the parent's hierarchy.
type ParentRoot struct {
	Run ParentRun `json:"run"`
	Job ParentJob `json:"job"`
}

// NominalTimeRunFacet is the period a run is scheduled for: the partition's
// day or hour, the end excluded.
type NominalTimeRunFacet struct {
	BaseFacet
	NominalStartTime time.Time  `json:"nominalStartTime"`
	NominalEndTime   *time.Time `json:"nominalEndTime,omitempty"`
}

// NominalTime is the facet of partition p: [midnight UTC, next midnight)
// for a date, [the hour, the next hour) for a timestamp, nil for a text
// partition, which names no time.
func NominalTime(producer string, p schemas.Partition) *NominalTimeRunFacet {
	var end time.Time
	switch p.Type {
	case schemas.PartitionDate:
		end = p.Time.UTC().AddDate(0, 0, 1)
	case schemas.PartitionHour:
		end = p.Time.UTC().Add(time.Hour)
	default:
		return nil
	}
	return &NominalTimeRunFacet{
		BaseFacet:        BaseFacet{producer, NominalTimeRunFacetSchemaURL},
		NominalStartTime: p.Time.UTC(),
		NominalEndTime:   &end,
	}
}

// ErrorMessageRunFacet is why a run failed.
type ErrorMessageRunFacet struct {
	BaseFacet
	Message             string `json:"message"`
	ProgrammingLanguage string `json:"programmingLanguage"`
	StackTrace          string `json:"stackTrace,omitempty"`
}

// ErrorMessage is the facet of a failed load's error message.
func ErrorMessage(producer, message string) *ErrorMessageRunFacet {
	return &ErrorMessageRunFacet{
		BaseFacet:           BaseFacet{producer, ErrorMessageRunFacetSchemaURL},
		Message:             message,
		ProgrammingLanguage: "GO",
	}
}

// JobTypeJobFacet says what kind of job this is.
type JobTypeJobFacet struct {
	BaseFacet
	ProcessingType string `json:"processingType"`
	Integration    string `json:"integration"`
	JobType        string `json:"jobType,omitempty"`
}

// Integration and JobTypeLoad are what idem's jobType facet says, with
// processing type BATCH.
const (
	Integration = "idem"
	JobTypeLoad = "LOAD"
)

// LoadJobType is the jobType facet of every idem job: a batch load.
func LoadJobType(producer string) *JobTypeJobFacet {
	return &JobTypeJobFacet{
		BaseFacet:      BaseFacet{producer, JobTypeJobFacetSchemaURL},
		ProcessingType: "BATCH",
		Integration:    Integration,
		JobType:        JobTypeLoad,
	}
}

// OutputStatisticsOutputDatasetFacet is how much a run wrote to a dataset.
type OutputStatisticsOutputDatasetFacet struct {
	BaseFacet
	RowCount int64 `json:"rowCount"`
}

// OutputStatistics is the facet of rows written to the target.
func OutputStatistics(producer string, rows int64) *OutputStatisticsOutputDatasetFacet {
	return &OutputStatisticsOutputDatasetFacet{
		BaseFacet: BaseFacet{producer, OutputStatisticsSchemaURL},
		RowCount:  rows,
	}
}

// DataQualityAssertionsDatasetFacet lists the tests run on a dataset and
// their outcomes.
type DataQualityAssertionsDatasetFacet struct {
	BaseFacet
	Assertions []Assertion `json:"assertions"`
}

// Assertion is one check's outcome. Assertion and Success are required;
// Success is false when the check found a problem, whatever its severity.
type Assertion struct {
	// Assertion classifies the test: row_count, not_null, custom_sql...
	Assertion string `json:"assertion"`
	Success   bool   `json:"success"`
	// Column is the column tested; empty for the whole dataset.
	Column string `json:"column,omitempty"`
	// Severity is error (a failure refuses the load) or warn.
	Severity string `json:"severity,omitempty"`
	// Name identifies the check within the dataset.
	Name     string `json:"name,omitempty"`
	Expected string `json:"expected,omitempty"`
	Actual   string `json:"actual,omitempty"`
}

// DataQualityAssertions is the facet of the checks' outcomes, nil when
// there are none.
func DataQualityAssertions(producer string, assertions []Assertion) *DataQualityAssertionsDatasetFacet {
	if len(assertions) == 0 {
		return nil
	}
	return &DataQualityAssertionsDatasetFacet{
		BaseFacet:  BaseFacet{producer, DataQualityAssertionsSchemaURL},
		Assertions: assertions,
	}
}

// SchemaDatasetFacet is a dataset's columns.
type SchemaDatasetFacet struct {
	BaseFacet
	Fields []SchemaField `json:"fields"`
}

// SchemaField is one column of a dataset.
type SchemaField struct {
	Name string `json:"name"`
	// Type is the column's type as PostgreSQL writes it (format_type:
	// "numeric(12,2)", "timestamp with time zone").
	Type string `json:"type,omitempty"`
	// OrdinalPosition is the column's place among the table's columns,
	// from 1.
	OrdinalPosition int `json:"ordinal_position,omitempty"`
}

// Schema is the facet of a dataset's columns, nil when none are known.
func Schema(producer string, fields []SchemaField) *SchemaDatasetFacet {
	if len(fields) == 0 {
		return nil
	}
	return &SchemaDatasetFacet{
		BaseFacet: BaseFacet{producer, SchemaDatasetFacetSchemaURL},
		Fields:    fields,
	}
}

// IdemRunFacet is idem's own run facet, key idem_run: which event and which
// audit row the run is, so a lineage backend's run leads back to
// idem.pipeline_audit.
type IdemRunFacet struct {
	BaseFacet
	// Partition is the canonical partition key.
	Partition string `json:"partition"`
	// RunID is the event's run_id, the scheduler's logical run (not the
	// OpenLineage run id).
	RunID   string `json:"runId"`
	AuditID int64  `json:"auditId"`
	Attempt int    `json:"attempt"`
	// SchemaChanges are the attempt's differences between its source's
	// columns and its target's, on COMPLETE and FAIL; left out when none.
	SchemaChanges []SchemaChange `json:"schemaChanges,omitempty"`
}

// SchemaChange is one difference a load met between the columns its
// source returned and its target's, and what the dataset's
// on_schema_change did with it: the row idem.schema_changes keeps beside
// the attempt, without its DDL and reason.
type SchemaChange struct {
	Column string `json:"column"`
	// Change is new_column, retyped or missing_column.
	Change string `json:"change"`
	// Action is added, widened, ignored, kept, refused or found (another
	// load made the change first).
	Action string `json:"action"`
	// OldType is the target's type, NewType the source's; each is empty
	// when the column is not on that side.
	OldType string `json:"oldType,omitempty"`
	NewType string `json:"newType,omitempty"`
	// Policy is the on_schema_change the load ran with.
	Policy string `json:"policy"`
}

// IdemFilesInputDatasetFacet lists the files a load attempt read from a
// partition's prefix, with the listing's fingerprint.
type IdemFilesInputDatasetFacet struct {
	BaseFacet
	Fingerprint string     `json:"fingerprint"`
	Files       []IdemFile `json:"files"`
}

// IdemFile is one file read, with the identity it was read with.
type IdemFile struct {
	URL       string     `json:"url"`
	Size      int64      `json:"size"`
	ETag      string     `json:"etag,omitempty"`
	VersionID string     `json:"versionId,omitempty"`
	Modified  *time.Time `json:"modified,omitempty"`
	SHA256    string     `json:"sha256,omitempty"`
	Rows      int64      `json:"rows"`
}
