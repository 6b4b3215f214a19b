package why

import "testing"

// The next command can be pasted into a shell whatever the partition and
// the dataset hold.
func TestNextCommandQuotesWhatAShellWouldRead(t *testing.T) {
	for in, want := range map[string]string{
		"2026-03-05":           "2026-03-05",
		"2026-03-05T13:00:00Z": "2026-03-05T13:00:00Z",
		"it's; rm -rf /":       `'it'\''s; rm -rf /'`,
		"$(reboot)":            `'$(reboot)'`,
		"":                     "''",
	} {
		if got := arg(in); got != want {
			t.Errorf("arg(%q) = %s, want %s", in, got, want)
		}
	}
	r := &Report{Dataset: "notes", Partition: "a b"}
	if got := missing(r).Next; got != "idem backfill notes --from 'a b' --to 'a b'" {
		t.Errorf("next: %s", got)
	}
}
