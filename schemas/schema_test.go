package schemas

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const schemaID = "https://idem.dev/schemas/partition_ready.v1.json"

func compileSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(PartitionReadyV1))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(schemaID, doc))
	sch, err := c.Compile(schemaID)
	require.NoError(t, err)
	return sch
}

func schemaAccepts(sch *jsonschema.Schema, body []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// TestSchemaAgreesWithDecode keeps partition_ready.v1.json, which publishers in
// other languages validate against, in step with Decode: whatever Decode
// accepts the schema accepts, and every rejection the schema can express, it
// makes.
func TestSchemaAgreesWithDecode(t *testing.T) {
	sch := compileSchema(t)
	for _, c := range append(append([]decodeCase{}, goodCases...), badCases...) {
		t.Run(c.name, func(t *testing.T) {
			err := schemaAccepts(sch, []byte(c.body))
			if c.field == "" || c.beyondSchema {
				assert.NoError(t, err, "the schema must accept this body")
			} else {
				assert.Error(t, err, "the schema must reject this body (Decode says %s)", c.field)
			}
		})
	}
}

func TestSchemaDocument(t *testing.T) {
	var doc struct {
		Schema     string   `json:"$schema"`
		ID         string   `json:"$id"`
		Required   []string `json:"required"`
		Additional *bool    `json:"additionalProperties"`
		Properties map[string]struct {
			Title       string `json:"title"`
			Description string `json:"description"`
			Pattern     string `json:"pattern"`
			MaxLength   int    `json:"maxLength"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(PartitionReadyV1, &doc))
	assert.Equal(t, "https://json-schema.org/draft/2020-12/schema", doc.Schema)
	assert.Equal(t, schemaID, doc.ID)
	assert.Equal(t, []string{"dataset", "partition", "run_id"}, doc.Required)
	require.NotNil(t, doc.Additional)
	assert.False(t, *doc.Additional)
	assert.Equal(t, datasetPattern.String(), doc.Properties["dataset"].Pattern)
	assert.Equal(t, MaxRunIDChars, doc.Properties["run_id"].MaxLength)
	assert.Equal(t, MaxPartitionChars, doc.Properties["partition"].MaxLength)
	for _, f := range fields {
		p, ok := doc.Properties[f]
		require.True(t, ok, "schema lacks %s", f)
		assert.NotEmpty(t, p.Title, f)
		assert.NotEmpty(t, p.Description, f)
	}
	assert.Len(t, doc.Properties, len(fields))
}
