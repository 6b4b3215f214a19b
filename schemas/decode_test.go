package schemas

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeGood(t *testing.T) {
	for _, c := range goodCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decode(c.subj(), []byte(c.body), testLookup)
			require.NoError(t, err)
			assert.Equal(t, c.key, got.Key.Key)
			assert.True(t, got.Key.Type.Valid())
			assert.True(t, strings.HasSuffix(c.subj(), "."+got.Dataset))
		})
	}
}

func TestDecodeBad(t *testing.T) {
	require.GreaterOrEqual(t, len(badCases), 30)
	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.subj(), []byte(c.body), testLookup)
			var ie *InvalidEventError
			require.True(t, errors.As(err, &ie), "want *InvalidEventError, got %v", err)
			assert.Equal(t, c.field, ie.Field, "reason: %s", ie.Reason)
			assert.NotEmpty(t, ie.Reason)
			assert.True(t, ie.Fatal())
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "invalid event: "+displayField(c.field)+": "), msg)
			assert.True(t, printable(msg), "Error() must be one printable line: %q", msg)
			assert.LessOrEqual(t, len(msg), 600, "Error() must stay header-sized")
		})
	}
}

func TestDecodeDetails(t *testing.T) {
	t.Run("decoded values", func(t *testing.T) {
		got, err := Decode("idem.ready.hourly", []byte(ev("hourly", "2026-11-28T18:30:00+05:30", "run 1", `"force":true`, `"attributes":{"by":"me"}`)), testLookup)
		require.NoError(t, err)
		assert.Equal(t, Event{
			PartitionReady: PartitionReady{Dataset: "hourly", Partition: "2026-11-28T18:30:00+05:30", RunID: "run 1", Force: true, Attributes: map[string]string{"by": "me"}},
			Key:            mustParse(t, PartitionHour, "2026-11-28T13:00:00Z"),
		}, got)
	})
	t.Run("empty attributes decode as nil", func(t *testing.T) {
		got, err := Decode("idem.ready.orders", []byte(order(`"attributes":{}`)), nil)
		require.NoError(t, err)
		assert.Nil(t, got.Attributes)
	})
	t.Run("nil lookup accepts any dataset as date", func(t *testing.T) {
		got, err := Decode("x.anything", []byte(ev("anything", "2026-11-28", "r1")), nil)
		require.NoError(t, err)
		assert.Equal(t, PartitionDate, got.Key.Type)
		_, err = Decode("x.anything", []byte(ev("anything", "eu-west", "r1")), nil)
		assert.Equal(t, "partition", fieldOf(t, err))
	})
	t.Run("unknown partition type from config", func(t *testing.T) {
		weekly := func(string) (PartitionType, bool) { return "weekly", true }
		_, err := Decode("idem.ready.orders", []byte(order()), weekly)
		assert.Equal(t, "partition", fieldOf(t, err))
	})
	t.Run("syntax error outranks field error", func(t *testing.T) {
		_, err := Decode("idem.ready.orders", []byte(`{"Dataset":"orders","run_id":5,`), nil)
		assert.Equal(t, "body", fieldOf(t, err))
		assert.Contains(t, err.Error(), "truncated")
	})
	t.Run("syntax error gives the byte offset", func(t *testing.T) {
		_, err := Decode("idem.ready.orders", []byte(`{"dataset":"orders",,}`), nil)
		assert.Contains(t, err.Error(), "at byte 20")
	})
	t.Run("empty subject", func(t *testing.T) {
		_, err := Decode("", []byte(order()), nil)
		assert.Equal(t, "subject", fieldOf(t, err))
	})
	t.Run("case variant suggests the field", func(t *testing.T) {
		_, err := Decode("idem.ready.orders", []byte(`{"Dataset":"orders"}`), nil)
		assert.Contains(t, err.Error(), `did you mean "dataset"`)
	})
	t.Run("hostile unknown field name stays one line", func(t *testing.T) {
		_, err := Decode("idem.ready.orders", []byte(`{"a\nb\u0000`+strings.Repeat("z", 5000)+`":1}`), nil)
		assert.True(t, printable(err.Error()))
		assert.Less(t, len(err.Error()), 600)
	})
	t.Run("the first of several errors is stable", func(t *testing.T) {
		body := []byte(`{"dataset":"Bad","partition":"2026-02-30","run_id":""}`)
		for range 20 {
			_, err := Decode("idem.ready.Bad", body, testLookup)
			assert.Equal(t, "dataset", fieldOf(t, err))
		}
	})
}

func fieldOf(t *testing.T, err error) string {
	t.Helper()
	var ie *InvalidEventError
	require.True(t, errors.As(err, &ie), "want *InvalidEventError, got %v", err)
	return ie.Field
}

func mustParse(t *testing.T, typ PartitionType, s string) Partition {
	t.Helper()
	p, err := ParsePartition(typ, s)
	require.NoError(t, err)
	return p
}
