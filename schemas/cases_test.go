package schemas

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// testLookup configures one dataset per partition type.
func testLookup(dataset string) (PartitionType, bool) {
	switch dataset {
	case "orders":
		return PartitionDate, true
	case "hourly":
		return PartitionHour, true
	case "tags":
		return PartitionText, true
	case "legacy": // config left partition_type empty
		return "", true
	case long63:
		return PartitionDate, true
	}
	return "", false
}

// decodeCase is one body through Decode with testLookup. The same table seeds
// FuzzDecode and TestSchemaAgreesWithDecode.
type decodeCase struct {
	name    string
	subject string // "" means idem.ready.orders
	body    string
	field   string // the expected InvalidEventError.Field; "" means valid
	key     string // for a valid body, the expected canonical partition
	// beyondSchema marks rejections the JSON Schema cannot express (context,
	// calendar, duplicates, encoding, size): the schema accepts those bodies.
	beyondSchema bool
}

func (c decodeCase) subj() string {
	if c.subject == "" {
		return "idem.ready.orders"
	}
	return c.subject
}

// ev builds a body with the three required fields and extra raw JSON members.
func ev(dataset, partition, runID string, extra ...string) string {
	s := `{"dataset":` + jsonString(dataset) + `,"partition":` + jsonString(partition) + `,"run_id":` + jsonString(runID)
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

// jsonString quotes s as JSON, leaving invalid UTF-8 bytes as they are so
// tests can send them.
func jsonString(s string) string {
	if !utf8.ValidString(s) {
		return `"` + s + `"`
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func order(extra ...string) string { return ev("orders", "2026-11-28", "r1", extra...) }

func manyAttrs(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return `"attributes":{` + strings.Join(parts, ",") + "}"
}

var (
	long63 = "d" + strings.Repeat("x", 62)
	runes  = func(r string, n int) string { return strings.Repeat(r, n) }
	nested = `"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100)
)

var goodCases = []decodeCase{
	{name: "minimal", body: order(), key: "2026-11-28"},
	{name: "spec example", body: `{"dataset": "orders", "partition": "2026-11-28", "run_id": "scheduled__2026-11-28", "force": false}`, key: "2026-11-28"},
	{name: "force", body: order(`"force":true`), key: "2026-11-28"},
	{name: "attributes", body: order(`"attributes":{"owner":"data-eng","ticket":"JIRA-1"}`), key: "2026-11-28"},
	{name: "empty attributes", body: order(`"attributes":{}`), key: "2026-11-28"},
	{name: "32 attributes", body: order(manyAttrs(32)), key: "2026-11-28"},
	{name: "empty attribute value", body: order(`"attributes":{"note":""}`), key: "2026-11-28"},
	{name: "field order and whitespace", body: " \n{ \"run_id\" : \"r1\",\t\"partition\":\"2026-11-28\" ,\"dataset\":\"orders\" }\r\n", key: "2026-11-28"},
	{name: "escapes", body: `{"dataset":"ord\u0065rs","partition":"2026-11-28","run_id":"a\/b \u00e9\"q\""}`, key: "2026-11-28"},
	{name: "sql in run_id", body: ev("orders", "2026-11-28", `'; DROP TABLE x; --`), key: "2026-11-28"},
	{name: "shell in run_id", body: ev("orders", "2026-11-28", "$(rm -rf /) `id` && echo"), key: "2026-11-28"},
	{name: "unicode run_id", body: ev("orders", "2026-11-28", "nächtlich 夜間 🌙"), key: "2026-11-28"},
	{name: "run_id 200 runes", body: ev("orders", "2026-11-28", runes("é", 200)), key: "2026-11-28"},
	{name: "leap day", body: ev("orders", "2028-02-29", "r1"), key: "2028-02-29"},
	{name: "long dataset", subject: "idem.ready." + long63, body: ev(long63, "2026-11-28", "r1"), key: "2026-11-28"},
	{name: "hour canonical", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T13:00:00Z", "r1"), key: "2026-11-28T13:00:00Z"},
	{name: "hour short", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T13", "r1"), key: "2026-11-28T13:00:00Z"},
	{name: "hour offset", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T18:30:00+05:30", "r1"), key: "2026-11-28T13:00:00Z"},
	{name: "hour offset crosses day", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T20:00:00-05:00", "r1"), key: "2026-11-29T01:00:00Z"},
	{name: "text partition", subject: "idem.ready.tags", body: ev("tags", "eu-west/v2 'x'; --", "r1"), key: "eu-west/v2 'x'; --"},
	{name: "text partition 200 runes", subject: "idem.ready.tags", body: ev("tags", runes("ß", 200), "r1"), key: runes("ß", 200)},
	{name: "empty type defaults to date", subject: "nats.custom.legacy", body: ev("legacy", "2026-11-28", "r1"), key: "2026-11-28"},
}

var badCases = []decodeCase{
	// The body as a whole.
	{name: "empty", body: "", field: "body"},
	{name: "only whitespace", body: " \n\t", field: "body"},
	{name: "too large", body: order(`"attributes":{"pad":"x"}`) + strings.Repeat(" ", MaxEventBytes), field: "body", beyondSchema: true},
	{name: "invalid utf-8", body: ev("orders", "2026-11-28", "r\xff1"), field: "body", beyondSchema: true},
	{name: "utf-8 bom", body: "\xef\xbb\xbf" + order(), field: "body"},
	{name: "truncated", body: `{"dataset":"orders","partition":"2026-11-28"`, field: "body"},
	{name: "truncated in string", body: `{"dataset":"orders","partition":"2026-`, field: "body"},
	{name: "truncated after unknown field", body: `{"bogus":1,"dataset":"orders"`, field: "body"},
	{name: "trailing comma", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"r1",}`, field: "body"},
	{name: "missing comma", body: `{"dataset":"orders" "partition":"2026-11-28","run_id":"r1"}`, field: "body"},
	{name: "single quotes", body: `{'dataset':'orders'}`, field: "body"},
	{name: "bad escape", body: ev("orders", "2026-11-28", "r1", `"attributes":{"a":"\x"}`), field: "body"},
	{name: "top level array", body: "[" + order() + "]", field: "body"},
	{name: "top level string", body: `"orders"`, field: "body"},
	{name: "top level null", body: "null", field: "body"},
	{name: "top level number", body: "42", field: "body"},
	{name: "two objects", body: order() + "\n" + order(), field: "body"},
	{name: "trailing garbage", body: order() + "x", field: "body"},

	// Keys.
	{name: "duplicate dataset", body: `{"dataset":"orders","dataset":"orders","partition":"2026-11-28","run_id":"r1"}`, field: "dataset", beyondSchema: true},
	{name: "duplicate through escape", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"r1","run_\u0069d":"r2"}`, field: "run_id", beyondSchema: true},
	{name: "duplicate attribute", body: order(`"attributes":{"a":"1","a":"2"}`), field: "attributes", beyondSchema: true},
	{name: "case variant key", body: `{"Dataset":"orders","partition":"2026-11-28","run_id":"r1"}`, field: "Dataset"},
	{name: "case variant extra", body: order(`"RUN_ID":"r2"`), field: "RUN_ID"},
	{name: "unknown field", body: order(`"extra":"x"`), field: "extra"},
	{name: "empty field name", body: order(`"":"x"`), field: "body"},
	{name: "unknown nested field", body: order(`"meta":{"a":[1,{"b":null}]}`), field: "meta"},
	{name: "unknown deep field", body: order(nested), field: "x"},
	{name: "missing dataset", body: `{"partition":"2026-11-28","run_id":"r1"}`, field: "dataset"},
	{name: "missing partition", body: `{"dataset":"orders","run_id":"r1"}`, field: "partition"},
	{name: "missing run_id", body: `{"dataset":"orders","partition":"2026-11-28"}`, field: "run_id"},
	{name: "empty object", body: `{}`, field: "dataset"},

	// Types.
	{name: "dataset null", body: `{"dataset":null,"partition":"2026-11-28","run_id":"r1"}`, field: "dataset"},
	{name: "partition array", body: `{"dataset":"orders","partition":["2026-11-28"],"run_id":"r1"}`, field: "partition"},
	{name: "partition object", body: `{"dataset":"orders","partition":{"date":"2026-11-28"},"run_id":"r1"}`, field: "partition"},
	{name: "run_id number", body: `{"dataset":"orders","partition":"2026-11-28","run_id":42}`, field: "run_id"},
	{name: "run_id huge number", body: `{"dataset":"orders","partition":"2026-11-28","run_id":1e999999}`, field: "run_id"},
	{name: "run_id bool", body: `{"dataset":"orders","partition":"2026-11-28","run_id":true}`, field: "run_id"},
	{name: "force string", body: order(`"force":"true"`), field: "force"},
	{name: "force number", body: order(`"force":1`), field: "force"},
	{name: "force huge integer", body: order(`"force":` + strings.Repeat("9", 400)), field: "force"},
	{name: "force null", body: order(`"force":null`), field: "force"},
	{name: "attributes array", body: order(`"attributes":["a","b"]`), field: "attributes"},
	{name: "attributes null", body: order(`"attributes":null`), field: "attributes"},
	{name: "attribute number", body: order(`"attributes":{"n":1}`), field: "attributes.n"},
	{name: "attribute null", body: order(`"attributes":{"n":null}`), field: "attributes.n"},
	{name: "attribute object", body: order(`"attributes":{"n":{"deep":"x"}}`), field: "attributes.n"},

	// dataset and subject.
	{name: "dataset uppercase", subject: "idem.ready.Orders", body: ev("Orders", "2026-11-28", "r1"), field: "dataset"},
	{name: "dataset leading digit", subject: "idem.ready.1orders", body: ev("1orders", "2026-11-28", "r1"), field: "dataset"},
	{name: "dataset hyphen", subject: "idem.ready.my-orders", body: ev("my-orders", "2026-11-28", "r1"), field: "dataset"},
	{name: "dataset 64 chars", subject: "idem.ready.d" + long63, body: ev("d"+long63, "2026-11-28", "r1"), field: "dataset"},
	{name: "dataset empty", subject: "idem.ready.", body: ev("", "2026-11-28", "r1"), field: "dataset"},
	{name: "dataset wildcard", subject: "idem.ready.>", body: ev(">", "2026-11-28", "r1"), field: "dataset"},
	{name: "subject mismatch", subject: "idem.ready.orders", body: ev("hourly", "2026-11-28T13", "r1"), field: "subject", beyondSchema: true},
	{name: "subject one token", subject: "tags2", body: ev("tags", "x", "r1"), field: "subject", beyondSchema: true},
	{name: "subject ends with dot", subject: "idem.ready.", body: order(), field: "subject", beyondSchema: true},
	{name: "not configured", subject: "idem.ready.customers", body: ev("customers", "2026-11-28", "r1"), field: "dataset", beyondSchema: true},

	// partition, by type.
	{name: "date february 30", body: ev("orders", "2026-02-30", "r1"), field: "partition", beyondSchema: true},
	{name: "date not leap", body: ev("orders", "2026-02-29", "r1"), field: "partition", beyondSchema: true},
	{name: "date month 13", body: ev("orders", "2026-13-01", "r1"), field: "partition", beyondSchema: true},
	{name: "date leading space", body: ev("orders", " 2026-11-28", "r1"), field: "partition", beyondSchema: true},
	{name: "date trailing space", body: ev("orders", "2026-11-28 ", "r1"), field: "partition", beyondSchema: true},
	{name: "date short year", body: ev("orders", "26-11-28", "r1"), field: "partition", beyondSchema: true},
	{name: "date unpadded", body: ev("orders", "2026-1-8", "r1"), field: "partition", beyondSchema: true},
	{name: "date year zero", body: ev("orders", "0000-01-01", "r1"), field: "partition", beyondSchema: true},
	{name: "date with time", body: ev("orders", "2026-11-28T00:00:00Z", "r1"), field: "partition", beyondSchema: true},
	{name: "date relative", body: ev("orders", "today", "r1"), field: "partition", beyondSchema: true},
	{name: "partition empty", body: ev("orders", "", "r1"), field: "partition"},
	{name: "hour half past", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T13:30:00Z", "r1"), field: "partition", beyondSchema: true},
	{name: "hour fraction", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T13:00:00.5Z", "r1"), field: "partition", beyondSchema: true},
	{name: "hour offset off the hour", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T13:00:00+05:30", "r1"), field: "partition", beyondSchema: true},
	{name: "hour as date", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28", "r1"), field: "partition", beyondSchema: true},
	{name: "hour 24", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T24", "r1"), field: "partition", beyondSchema: true},
	{name: "hour no zone", subject: "idem.ready.hourly", body: ev("hourly", "2026-11-28T13:00:00", "r1"), field: "partition", beyondSchema: true},
	{name: "text newline", subject: "idem.ready.tags", body: ev("tags", "a\nb", "r1"), field: "partition"},
	{name: "text nul", subject: "idem.ready.tags", body: ev("tags", "a\x00b", "r1"), field: "partition"},
	{name: "text 201 runes", subject: "idem.ready.tags", body: ev("tags", runes("ß", 201), "r1"), field: "partition"},

	// run_id.
	{name: "run_id empty", body: ev("orders", "2026-11-28", ""), field: "run_id"},
	{name: "run_id 201 runes", body: ev("orders", "2026-11-28", runes("é", 201)), field: "run_id"},
	{name: "run_id tab", body: ev("orders", "2026-11-28", "a\tb"), field: "run_id"},
	{name: "run_id newline", body: ev("orders", "2026-11-28", "a\r\nIdem-Error: forged"), field: "run_id"},
	{name: "run_id escape char", body: ev("orders", "2026-11-28", "\x1b[31mred"), field: "run_id"},
	{name: "run_id bidi override", body: ev("orders", "2026-11-28", "abc\u202edef"), field: "run_id"},
	{name: "run_id no-break space", body: ev("orders", "2026-11-28", "a\u00a0b"), field: "run_id"},

	// attributes content.
	{name: "33 attributes", body: order(manyAttrs(33)), field: "attributes"},
	{name: "attribute empty key", body: order(`"attributes":{"":"v"}`), field: "attributes"},
	{name: "attribute key 65 chars", body: order(`"attributes":{"` + runes("k", 65) + `":"v"}`), field: "attributes"},
	{name: "attribute key newline", body: order(`"attributes":{"a\nb":"v"}`), field: "attributes"},
	{name: "attribute value 1025 chars", body: order(`"attributes":{"note":"` + runes("v", 1025) + `"}`), field: "attributes.note"},
	{name: "attribute value control", body: order(`"attributes":{"note":"a\rb"}`), field: "attributes.note"},
}
