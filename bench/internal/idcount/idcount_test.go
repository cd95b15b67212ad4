package idcount

import "testing"

// TestCounter checks the duplicate count of the competing-consumer runs:
// an event ID handled twice counts once as a duplicate, and every call
// counts as a handler call.
func TestCounter(t *testing.T) {
	k := New(4)
	var fresh int
	for _, id := range []string{"a", "b", "a", "c", "a"} {
		if k.Handled(id) {
			fresh++
		}
	}
	if calls, dups := k.Calls(), k.Duplicates(); calls != 5 || dups != 2 || fresh != 3 {
		t.Fatalf("calls=%d dups=%d new=%d, want 5, 2 and 3", calls, dups, fresh)
	}
}
