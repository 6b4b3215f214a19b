package schemas

import _ "embed"

// PartitionReadyV1 is the JSON Schema (draft 2020-12) of the wire body, for
// publishers in other languages and for documentation. Decode enforces it and
// more (see the package doc); TestSchemaAgreesWithDecode keeps the two in step.
//
//go:embed partition_ready.v1.json
var PartitionReadyV1 []byte
