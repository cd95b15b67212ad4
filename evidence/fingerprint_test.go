package evidence

import "testing"

func TestFingerprint(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"order 12345 not found", "order <n> not found"},
		{`invalid "abc"`, "invalid <q>"},
		{`invalid 'abc'`, "invalid <q>"},
		{"invalid `abc`", "invalid <q>"},
		{`field "a \"b\" c" is required`, "field <q> is required"},
		{"can't find 'x', don't retry", "can't find <q>, don't retry"},
		{"event 01936f7e-8a2b-7c3d-9e4f-0a1b2c3d4e5f already processed", "event <id> already processed"},
		{"event 550E8400-E29B-41D4-A716-446655440000 duplicate", "event <id> duplicate"},
		{"object 507f1f77bcf86cd799439011 missing", "object <id> missing"},
		{"commit 3f2a9c1d", "commit <id>"},
		{"addr 0xc000123abc", "addr <id>"},
		{"deadbeef is a word here", "deadbeef is a word here"},
		{"dial tcp 10.0.0.7:5432: connect: connection refused", "dial tcp <n>:<n>: connect: connection refused"},
		{"timeout after 500ms", "timeout after <n>ms"},
		{"price 3.14 exceeds 2,000", "price <n> exceeds <n>"},
		{"http2: stream 7 reset; use v1", "http2: stream <n> reset; use v1"},
		{"  too   many\tspaces \n here ", "too many spaces here"},
		{"retry-3 of 5", "retry-<n> of <n>"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Fingerprint(tt.in); got != tt.want {
			t.Errorf("Fingerprint(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

func TestFingerprintGroups(t *testing.T) {
	same := [][2]string{
		{"order 12345 not found", "order 99 not found"},
		{`invalid "abc"`, `invalid "xyz"`},
		{"user 8c1e0c3a-0e8b-4c8e-9a4e-1b2c3d4e5f60 locked", "user 00000000-0000-0000-0000-000000000001 locked"},
		{"decode: unexpected 'x' at offset 17", "decode: unexpected 'quote' at offset 4242"},
	}
	for _, p := range same {
		if a, b := Fingerprint(p[0]), Fingerprint(p[1]); a != b {
			t.Errorf("%q → %q and %q → %q differ", p[0], a, p[1], b)
		}
	}
	different := [][2]string{
		{"order 1 not found", "customer 1 not found"},
		{"connection refused", "connection reset"},
	}
	for _, p := range different {
		if Fingerprint(p[0]) == Fingerprint(p[1]) {
			t.Errorf("%q and %q share a fingerprint", p[0], p[1])
		}
	}
}
