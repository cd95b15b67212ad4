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
