package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Wire limits, shared by Decode, Marshal and partition_ready.v1.json.
const (
	MaxEventBytes = 64 << 10 // 64 KiB, the whole body
	MaxRunIDChars = 200
	MaxAttributes = 32

	// MaxAttributeKeyChars and MaxAttributeValueChars bound one attribute.
	MaxAttributeKeyChars   = 64
	MaxAttributeValueChars = 1024
)

var datasetPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// ValidDataset reports whether name can be a dataset: it becomes a NATS subject
// token and part of Postgres object names, hence the narrow alphabet.
func ValidDataset(name string) bool { return datasetPattern.MatchString(name) }

// PartitionReady is the wire body, described by partition_ready.v1.json.
type PartitionReady struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	RunID     string `json:"run_id"`
	Force     bool   `json:"force,omitempty"`
	// Attributes are recorded, never executed. Decode leaves them nil when the
	// body has none or an empty object, so re-marshalling round-trips.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Event is a decoded, validated event. The embedded PartitionReady keeps the
// partition as sent; Key is the parsed partition, whose Key field is the
// canonical form.
type Event struct {
	PartitionReady
	Key Partition
}

// MsgID is the Nats-Msg-Id for publishing e, "<dataset>:<partition>:<run_id>",
// so JetStream drops a duplicate publish of the same run inside its window.
// It uses the partition as written: publishers should set Partition to the
// canonical key (Partition.Key) so equal runs get equal ids.
func (e PartitionReady) MsgID() string {
	return e.Dataset + ":" + e.Partition + ":" + e.RunID
}

// Subject is the subject of an event of dataset under prefix (e.g.
// "idem.ready"): "<prefix>.<dataset>".
func Subject(prefix, dataset string) string { return prefix + "." + dataset }

// BackfillPrefix is the prefix of the backfill lane's subjects for the
// events prefix: its last token replaced by "backfill" (idem.ready ->
// idem.backfill), or "_backfill" appended to a one-token prefix. The lane
// carries the same bodies as the ready subjects; only the consumer that
// reads them differs, so a backfill never queues a live partition behind
// it.
func BackfillPrefix(prefix string) string {
	i := strings.LastIndexByte(prefix, '.')
	if i < 0 {
		return prefix + "_backfill"
	}
	return prefix[:i+1] + "backfill"
}

// TriggeredMsgID is the Nats-Msg-Id of an event that upstream attempt
// auditID triggered (the outbox of `then:`), with the token of the outbox
// row that holds it: one per upstream commit, so a relay that publishes the
// same row twice is deduplicated, and two upstream commits are two events,
// even when a failover that lost the first gave the second its audit id.
func (e PartitionReady) TriggeredMsgID(auditID int64, token string) string {
	id := e.MsgID() + ":" + strconv.FormatInt(auditID, 10)
	if token != "" {
		id += ":" + token
	}
	return id
}

// Marshal renders e as the compact JSON a publisher sends. It refuses what
// Decode would refuse whatever the configuration (a bad dataset name, an
// unprintable run_id, ...), so nothing idem publishes is dead-lettered for its
// shape. Whether the dataset is configured and the partition fits its type is
// for Decode to say.
func (e PartitionReady) Marshal() ([]byte, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// <, > and & stay readable: nothing here is embedded in HTML.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("schemas: marshal event: %w", err)
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(out) > MaxEventBytes {
		return nil, invalid("body", fmt.Sprintf("is %d bytes; the limit is %d", len(out), MaxEventBytes))
	}
	return out, nil
}

// check applies the rules that need no configuration, in the order a reader
// would fix them.
func (e PartitionReady) check() error {
	if err := checkDataset(e.Dataset); err != nil {
		return err
	}
	if err := checkPartitionShape(e.Partition); err != nil {
		return err
	}
	if err := checkRunID(e.RunID); err != nil {
		return err
	}
	return checkAttributes(e.Attributes)
}

func checkDataset(name string) error {
	if !ValidDataset(name) {
		return invalid("dataset", fmt.Sprintf("%s must match ^[a-z][a-z0-9_]{0,62}$: a lowercase letter, then lowercase letters, digits or underscores", quote(name)))
	}
	return nil
}

// checkPartitionShape holds for every partition type; ParsePartition is stricter.
func checkPartitionShape(p string) error {
	_, err := parseText(p)
	return err
}

func checkRunID(id string) error {
	n := utf8.RuneCountInString(id)
	switch {
	case n == 0:
		return invalid("run_id", "is empty; want 1-200 printable characters naming the logical run, e.g. scheduled__2026-11-28")
	case n > MaxRunIDChars:
		return invalid("run_id", fmt.Sprintf("has %d characters; the limit is %d", n, MaxRunIDChars))
	case !printable(id):
		return invalid("run_id", "contains "+firstUnprintable(id)+"; only printable characters are allowed")
	}
	return nil
}

func checkAttributes(attrs map[string]string) error {
	if len(attrs) > MaxAttributes {
		return invalid("attributes", fmt.Sprintf("has %d entries; the limit is %d", len(attrs), MaxAttributes))
	}
	// Sorted, so the same bad body always gets the same error.
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := checkAttribute(k, attrs[k]); err != nil {
			return err
		}
	}
	return nil
}

func checkAttribute(k, v string) error {
	n := utf8.RuneCountInString(k)
	switch {
	case n == 0:
		return invalid("attributes", "has an empty key; keys are 1-64 printable characters")
	case n > MaxAttributeKeyChars:
		return invalid("attributes", fmt.Sprintf("key %s has %d characters; the limit is %d", quote(k), n, MaxAttributeKeyChars))
	case !printable(k):
		return invalid("attributes", fmt.Sprintf("key %s contains %s; only printable characters are allowed", quote(k), firstUnprintable(k)))
	}
	field := "attributes." + k
	if n := utf8.RuneCountInString(v); n > MaxAttributeValueChars {
		return invalid(field, fmt.Sprintf("has %d characters; the limit is %d", n, MaxAttributeValueChars))
	}
	if !printable(v) {
		return invalid(field, "contains "+firstUnprintable(v)+"; only printable characters are allowed")
	}
	return nil
}
