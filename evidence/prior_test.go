package evidence

import "testing"

// TestPriorDeliveries: only a signed integer in 1..MaxPriorDeliveries is a
// carried count; anything else (absent, a string, a float, an unsigned
// integer, zero, negative, too large) is ignored as 0.
func TestPriorDeliveries(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{
		{nil, 0}, {int32(1), 1}, {int64(3), 3}, {int8(2), 2}, {int16(4), 4}, {7, 7},
		{int32(MaxPriorDeliveries), MaxPriorDeliveries}, {int32(MaxPriorDeliveries + 1), 0},
		{int32(0), 0}, {int64(-2), 0}, {"3", 0}, {3.0, 0}, {uint32(3), 0},
	} {
		if got := PriorDeliveries(c.v); got != c.want {
			t.Errorf("PriorDeliveries(%#v) = %d, want %d", c.v, got, c.want)
		}
	}
}

// TestCarriedDeliveries: a copy carries the hand-outs before the one given
// back, bounded so that PriorDeliveries reads it back.
func TestCarriedDeliveries(t *testing.T) {
	for count, want := range map[int]int32{0: 0, 1: 0, 2: 1, 5: 4, MaxPriorDeliveries + 1: MaxPriorDeliveries, 1000: MaxPriorDeliveries} {
		got := CarriedDeliveries(count)
		if got != want {
			t.Errorf("CarriedDeliveries(%d) = %d, want %d", count, got, want)
		}
		if got > 0 && PriorDeliveries(got) != int(got) {
			t.Errorf("PriorDeliveries(CarriedDeliveries(%d)) = %d, want %d", count, PriorDeliveries(got), got)
		}
	}
}
