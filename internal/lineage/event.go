package lineage

import (
	"encoding/json"
	"time"
)

// EventType is a run's transition.
type EventType string

// The transitions idem emits: START, then one of COMPLETE, FAIL, ABORT.
const (
	Start    EventType = "START"
	Complete EventType = "COMPLETE"
	Fail     EventType = "FAIL"
	Abort    EventType = "ABORT"
)

// RunEventSchemaURL is the schemaURL of every event: the RunEvent definition
// of the OpenLineage spec version the structs follow.
const RunEventSchemaURL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"

// DefaultProducer is the producer URI when none is given; a build may pass
// one that names its version.
const DefaultProducer = "https://github.com/idem-data/idem"

// RunEvent is one OpenLineage run event.
type RunEvent struct {
	EventType EventType `json:"eventType"`
	// EventTime is when the transition happened, in UTC.
	EventTime time.Time `json:"eventTime"`
	// Producer is a URI naming what emitted the event.
	Producer  string          `json:"producer"`
	SchemaURL string          `json:"schemaURL"`
	Run       Run             `json:"run"`
	Job       Job             `json:"job"`
	Inputs    []InputDataset  `json:"inputs,omitempty"`
	Outputs   []OutputDataset `json:"outputs,omitempty"`
}

// Marshal renders e as JSON. Strings are escaped as encoding/json does,
// HTML-safe (<, > and & as \u escapes) and with invalid UTF-8 replaced, so
// whatever an event holds stays data in the document and in any page a
// backend embeds it in.
func (e RunEvent) Marshal() ([]byte, error) { return json.Marshal(e) }

// Run is the run an event is about.
type Run struct {
	// RunID is a UUID, lower-case (see RunID).
	RunID  string    `json:"runId"`
	Facets RunFacets `json:"facets,omitzero"`
}

// RunFacets are the run facets idem emits; nil ones are left out.
type RunFacets struct {
	Parent       *ParentRunFacet       `json:"parent,omitempty"`
	NominalTime  *NominalTimeRunFacet  `json:"nominalTime,omitempty"`
	ErrorMessage *ErrorMessageRunFacet `json:"errorMessage,omitempty"`
	Idem         *IdemRunFacet         `json:"idem_run,omitempty"`
}

// Job is the job a run belongs to.
type Job struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Facets    JobFacets `json:"facets,omitzero"`
}

// JobFacets are the job facets idem emits.
type JobFacets struct {
	JobType *JobTypeJobFacet `json:"jobType,omitempty"`
}

// Dataset names a dataset: a datasource's namespace and a name within it.
type Dataset struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// InputDataset is a dataset the run reads.
type InputDataset struct {
	Dataset
	InputFacets InputDatasetFacets `json:"inputFacets,omitzero"`
}

// InputDatasetFacets describe what the run read of a dataset.
type InputDatasetFacets struct {
	Files *IdemFilesInputDatasetFacet `json:"idem_files,omitempty"`
}

// OutputDataset is a dataset the run writes.
type OutputDataset struct {
	Dataset
	Facets       DatasetFacets       `json:"facets,omitzero"`
	OutputFacets OutputDatasetFacets `json:"outputFacets,omitzero"`
}

// DatasetFacets describe a dataset itself, whichever way the run uses it.
type DatasetFacets struct {
	Schema                *SchemaDatasetFacet                `json:"schema,omitempty"`
	DataQualityAssertions *DataQualityAssertionsDatasetFacet `json:"dataQualityAssertions,omitempty"`
}

// OutputDatasetFacets describe what the run wrote to a dataset.
type OutputDatasetFacets struct {
	OutputStatistics *OutputStatisticsOutputDatasetFacet `json:"outputStatistics,omitempty"`
}
