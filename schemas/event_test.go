package schemas

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestValidDataset(t *testing.T) {
	for _, ok := range []string{"a", "orders", "fact_orders_2", long63} {
		assert.True(t, ValidDataset(ok), ok)
	}
	for _, bad := range []string{"", "Orders", "_orders", "1a", "my-orders", "a.b", "a b", "d" + long63, "orders\n", "é"} {
		assert.False(t, ValidDataset(bad), bad)
	}
}

func TestMarshal(t *testing.T) {
	e := PartitionReady{Dataset: "orders", Partition: "2026-11-28", RunID: "a<b>&'c'"}
	b, err := e.Marshal()
	require.NoError(t, err)
	assert.Equal(t, `{"dataset":"orders","partition":"2026-11-28","run_id":"a<b>&'c'"}`, string(b))

	e.Force = true
	e.Attributes = map[string]string{"z": "1", "a": "2"}
	b, err = e.Marshal()
	require.NoError(t, err)
	assert.Equal(t, `{"dataset":"orders","partition":"2026-11-28","run_id":"a<b>&'c'","force":true,"attributes":{"a":"2","z":"1"}}`, string(b))

	got, err := Decode("idem.ready.orders", b, nil)
	require.NoError(t, err)
	assert.Equal(t, e, got.PartitionReady)
}

func TestMarshalRefusesWhatDecodeWould(t *testing.T) {
	good := PartitionReady{Dataset: "orders", Partition: "2026-11-28", RunID: "r1"}
	for field, mutate := range map[string]func(*PartitionReady){
		"dataset":         func(e *PartitionReady) { e.Dataset = "Orders" },
		"partition":       func(e *PartitionReady) { e.Partition = "" },
		"run_id":          func(e *PartitionReady) { e.RunID = "a\nb" },
		"attributes":      func(e *PartitionReady) { e.Attributes = map[string]string{"": "x"} },
		"attributes.note": func(e *PartitionReady) { e.Attributes = map[string]string{"note": "\x00"} },
	} {
		e := good
		mutate(&e)
		_, err := e.Marshal()
		assert.Equal(t, field, fieldOf(t, err))
	}
	many := good
	many.Attributes = map[string]string{}
	for i := range MaxAttributes + 1 {
		many.Attributes[strings.Repeat("k", i+1)] = "v"
	}
	_, err := many.Marshal()
	assert.Equal(t, "attributes", fieldOf(t, err))
}

func TestMsgID(t *testing.T) {
	e := PartitionReady{Dataset: "orders", Partition: "2026-11-28", RunID: "scheduled__2026-11-28", Force: true}
	assert.Equal(t, "orders:2026-11-28:scheduled__2026-11-28", e.MsgID())
}

func TestInvalidEventError(t *testing.T) {
	var fatal interface{ Fatal() bool } = &InvalidEventError{}
	assert.True(t, fatal.Fatal())
	assert.Equal(t, "invalid event: run_id: is empty", (&InvalidEventError{Field: "run_id", Reason: "is empty"}).Error())
	assert.Equal(t, `invalid event: "a\nb": is not a field`, (&InvalidEventError{Field: "a\nb", Reason: "is not a field"}).Error())
}

// TestMarshalDecodeProperty: for a text-partitioned dataset, Marshal and
// Decode accept exactly the same events, and Decode gives back what was
// marshalled.
func TestMarshalDecodeProperty(t *testing.T) {
	text := func(string) (PartitionType, bool) { return PartitionText, true }
	// Mostly valid strings, so the accepting path is well exercised too.
	str := func(max int) *rapid.Generator[string] {
		good := rapid.StringOfN(rapid.RuneFrom([]rune(`aé 'ß"\<&😀:$`)), 1, max, -1)
		bad := rapid.StringOfN(rapid.RuneFrom([]rune("aé\t\n\x00\u00a0\u202e")), 0, max+1, -1)
		return rapid.OneOf(good, good, good, bad, rapid.StringN(0, max+1, -1))
	}
	dataset := rapid.StringMatching(`[a-z][a-z0-9_]{0,62}`)
	few := rapid.MapOfN(str(MaxAttributeKeyChars), str(MaxAttributeValueChars), 0, 2)
	many := rapid.MapOfN(rapid.StringN(0, MaxAttributeKeyChars+1, -1), rapid.StringN(0, 8, -1), 0, MaxAttributes+1)
	rapid.Check(t, func(t *rapid.T) {
		e := PartitionReady{
			Dataset:   rapid.OneOf(dataset, dataset, dataset, rapid.String()).Draw(t, "dataset"),
			Partition: str(MaxPartitionChars).Draw(t, "partition"),
			RunID:     str(MaxRunIDChars).Draw(t, "run_id"),
			Force:     rapid.Bool().Draw(t, "force"),
		}
		if attrs := rapid.OneOf(few, few, many).Draw(t, "attributes"); len(attrs) > 0 {
			e.Attributes = attrs
		}
		body, merr := e.Marshal()
		if merr != nil {
			var ie *InvalidEventError
			if !errors.As(merr, &ie) || ie.Field == "" {
				t.Fatalf("Marshal error without a field: %v", merr)
			}
			// The same event sent by a laxer publisher must be refused too.
			raw, err := json.Marshal(e)
			require.NoError(t, err)
			if _, err := Decode("idem.ready."+e.Dataset, raw, text); err == nil {
				t.Fatalf("Decode accepted what Marshal refuses (%v): %s", merr, raw)
			}
			return
		}
		got, derr := Decode("idem.ready."+e.Dataset, body, text)
		if derr != nil {
			t.Fatalf("Marshal accepted what Decode refuses: %s: %v", body, derr)
		}
		if !equalEvents(got, Event{PartitionReady: e, Key: Partition{Type: PartitionText, Key: e.Partition}}) {
			t.Fatalf("round trip: %#v != %#v", got.PartitionReady, e)
		}
	})
}
