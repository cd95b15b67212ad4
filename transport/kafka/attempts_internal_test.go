package kafka

import (
	"reflect"
	"testing"
)

func TestAttemptsEncoding(t *testing.T) {
	for _, a := range []Attempts{{}, {0: 1}, {5: 2, 3: 1, 1 << 40: 7, 1<<40 + 1: 1000}} {
		b := encodeAttempts(a)
		got, err := decodeAttempts(b)
		if err != nil {
			t.Fatalf("%v: %v", a, err)
		}
		if !reflect.DeepEqual(got, a) {
			t.Errorf("round trip %v → %v", a, got)
		}
	}
	if b := encodeAttempts(Attempts{100: 1, 101: 1, 102: 2}); len(b) > 8 {
		t.Errorf("3 neighbouring offsets take %d bytes, want a compact delta encoding", len(b))
	}
	if got, err := decodeAttempts(nil); err != nil || len(got) != 0 {
		t.Errorf("a tombstone reads as %v (%v), want empty", got, err)
	}
	for _, bad := range [][]byte{{2}, {1, 5}, {1, 1, 0x80}} {
		if _, err := decodeAttempts(bad); err == nil {
			t.Errorf("corrupt snapshot %x accepted", bad)
		}
	}
}
