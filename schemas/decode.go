package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Lookup tells the partition type of a configured dataset; ok=false means the
// dataset is not configured. An empty type counts as PartitionDate.
type Lookup func(dataset string) (t PartitionType, ok bool)

// Decode validates one message. subject is the NATS subject it arrived on
// (e.g. "idem.ready.orders"), whose last token must equal the body's dataset;
// body is the raw message data. lookup may be nil, in which case every dataset
// is accepted and typed PartitionDate.
//
// Every error is an *InvalidEventError. Body-level problems (size, encoding,
// JSON syntax) are reported before field-level ones, then fields in a fixed
// order, so the same bytes always yield the same error.
func Decode(subject string, body []byte, lookup Lookup) (Event, error) {
	// Size first: nothing below should spend time on an oversized body.
	switch {
	case len(body) > MaxEventBytes:
		return Event{}, invalid("body", fmt.Sprintf("is %d bytes; the limit is %d (64 KiB): put large data in the source tables, not in the event", len(body), MaxEventBytes))
	case len(bytes.TrimLeft(body, jsonSpace)) == 0:
		return Event{}, invalid("body", `is empty; want a JSON object such as {"dataset":"orders","partition":"2026-11-28","run_id":"manual__1"}`)
	case !utf8.Valid(body):
		return Event{}, invalid("body", fmt.Sprintf("is not valid UTF-8 at byte %d", invalidUTF8Offset(body)))
	case bytes.HasPrefix(body, utf8BOM):
		return Event{}, invalid("body", "starts with a UTF-8 byte order mark; send the JSON without it")
	}

	w, err := scanBody(body)
	if err != nil {
		return Event{}, err
	}
	e := w.event

	for _, f := range [...]string{"dataset", "partition", "run_id"} {
		if !w.seen[f] {
			return Event{}, invalid(f, "is required")
		}
	}
	if err := checkDataset(e.Dataset); err != nil {
		return Event{}, err
	}
	if err := checkSubject(subject, e.Dataset); err != nil {
		return Event{}, err
	}
	typ := PartitionDate
	if lookup != nil {
		t, ok := lookup(e.Dataset)
		if !ok {
			err := invalid("dataset", fmt.Sprintf("%s is not a configured dataset; add it under datasets: in the config or fix the publisher", quote(e.Dataset)))
			err.unknownDataset = true
			return Event{}, err
		}
		if t != "" {
			typ = t
		}
	}
	key, err := ParsePartition(typ, e.Partition)
	if err != nil {
		return Event{}, err
	}
	if err := checkRunID(e.RunID); err != nil {
		return Event{}, err
	}
	if err := checkAttributes(e.Attributes); err != nil {
		return Event{}, err
	}
	return Event{PartitionReady: e, Key: key}, nil
}

// checkSubject ties the body to the subject, so a message published to one
// dataset's subject can never load another dataset.
func checkSubject(subject, dataset string) error {
	i := strings.LastIndexByte(subject, '.')
	last := subject[i+1:]
	if last == "" {
		return invalid("subject", fmt.Sprintf("%s has no dataset token; want e.g. idem.ready.%s", quote(subject), dataset))
	}
	if last != dataset {
		return invalid("subject", fmt.Sprintf("%s is for dataset %s but the body says %s; publish to the subject ending in .%s",
			quote(subject), quote(last), quote(dataset), dataset))
	}
	return nil
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}

var utf8BOM = []byte("\xef\xbb\xbf")

// jsonSpace is JSON's insignificant whitespace (RFC 8259), narrower than
// unicode.IsSpace.
const jsonSpace = " \t\r\n"

// syntaxError turns an encoding/json error into a body rejection with the byte
// offset at which parsing stopped (offset is the decoder's position, used when
// the error carries none).
func syntaxError(err error, offset int64) *InvalidEventError {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return invalid("body", fmt.Sprintf("is not valid JSON at byte %d: %s", se.Offset, se.Error()))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", fmt.Sprintf("is truncated JSON: it ends at byte %d before the object is closed", offset))
	}
	return invalid("body", fmt.Sprintf("is not valid JSON at byte %d: %v", offset, err))
}
