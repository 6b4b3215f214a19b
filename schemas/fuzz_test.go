package schemas

import (
	"errors"
	"strings"
	"testing"
)

// fuzzLookup types any dataset by its first letter, so mutated bodies reach
// every partition type without matching a fixed list.
func fuzzLookup(dataset string) (PartitionType, bool) {
	switch {
	case strings.HasPrefix(dataset, "h"):
		return PartitionHour, true
	case strings.HasPrefix(dataset, "t"):
		return PartitionText, true
	case strings.HasPrefix(dataset, "u"):
		return "", false
	}
	return PartitionDate, true
}

// FuzzDecode checks that Decode never panics, rejects only with
// *InvalidEventError, and that an accepted event survives Marshal and Decode
// unchanged, in its sent and its canonical form.
func FuzzDecode(f *testing.F) {
	for _, c := range append(append([]decodeCase{}, goodCases...), badCases...) {
		f.Add(c.subj(), []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		got, err := Decode(subject, body, fuzzLookup)
		if err != nil {
			var ie *InvalidEventError
			if !errors.As(err, &ie) || ie.Field == "" || ie.Reason == "" {
				t.Fatalf("rejection is not a complete *InvalidEventError: %#v", err)
			}
			if !printable(err.Error()) {
				t.Fatalf("Error() is not one printable line: %q", err.Error())
			}
			return
		}
		again := redecode(t, subject, got.PartitionReady)
		if !equalEvents(got, again) {
			t.Fatalf("round trip changed the event:\n got %#v\nthen %#v", got, again)
		}
		canon := got.PartitionReady
		canon.Partition = got.Key.Key
		if c := redecode(t, subject, canon); c.Key != got.Key {
			t.Fatalf("canonical key %q decodes to %#v, want %#v", got.Key.Key, c.Key, got.Key)
		}
	})
}

func redecode(t *testing.T, subject string, e PartitionReady) Event {
	t.Helper()
	b, err := e.Marshal()
	if err != nil {
		t.Fatalf("Marshal refused what Decode accepted: %v", err)
	}
	ev, err := Decode(subject, b, fuzzLookup)
	if err != nil {
		t.Fatalf("Decode refused Marshal's output %s: %v", b, err)
	}
	return ev
}

// equalEvents compares without reflect, so the fuzz loop stays fast.
func equalEvents(a, b Event) bool {
	if a.Dataset != b.Dataset || a.Partition != b.Partition || a.RunID != b.RunID ||
		a.Force != b.Force || a.Key != b.Key || len(a.Attributes) != len(b.Attributes) ||
		(a.Attributes == nil) != (b.Attributes == nil) {
		return false
	}
	for k, v := range a.Attributes {
		if w, ok := b.Attributes[k]; !ok || w != v {
			return false
		}
	}
	return true
}
