package evidence

import (
	"maps"
	"reflect"
	"testing"
	"time"
)

func TestRedriveHeaders(t *testing.T) {
	h := map[string]any{
		HeaderEventID:      "e1",
		HeaderKey:          "order-1",
		HeaderType:         "OrderPlaced",
		HeaderTraceparent:  "00-a-b-01",
		"tenant":           "acme",
		"x-death":          []any{map[string]any{"reason": "rejected"}},
		HeaderRetryCount:   "0", // non-canonical
		HeaderRedriveCount: int32(1),
	}
	Record{
		Reason: ReasonInvalidRetryCount, RawRetryCount: FormatRaw("0"), ErrorMessage: "bad",
		DeadLetteredAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), DeliveryCount: 1,
	}.Apply(h)
	before := maps.Clone(h)

	got := RedriveHeaders(h)
	if !reflect.DeepEqual(h, before) {
		t.Error("input modified")
	}
	want := map[string]any{
		HeaderEventID:      "e1",
		HeaderKey:          "order-1",
		HeaderType:         "OrderPlaced",
		HeaderTraceparent:  "00-a-b-01",
		"tenant":           "acme",
		"x-death":          []any{map[string]any{"reason": "rejected"}},
		HeaderRetryCount:   int32(0),
		HeaderRedriveCount: int32(2),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}
	if n, err := RetryCount(got); n != 0 || err != nil {
		t.Errorf("RetryCount = %d, %v", n, err)
	}

	first := RedriveHeaders(nil)
	if RedriveCount(first) != 1 || first[HeaderRetryCount] != int32(0) || len(first) != 2 {
		t.Errorf("RedriveHeaders(nil) = %#v", first)
	}
}
