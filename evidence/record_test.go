package evidence

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
)

func fullRecord() Record {
	return Record{
		Reason:          ReasonRetriesExhausted,
		ErrorType:       "*net.OpError",
		ErrorMessage:    "dial tcp 10.0.0.7:5432: connect: connection refused",
		ErrorStack:      "goroutine 1 [running]:\nmain.main()\n\t/app/main.go:12",
		Source:          "rabbitmq/orders.created",
		SourcePartition: 3,
		HasPartition:    true,
		SourceOffset:    1 << 40,
		HasOffset:       true,
		SourceMessageID: "01936f7e-0000-7000-8000-000000000001",
		DeliveryCount:   2,
		RetryCount:      3,
		RedriveCount:    1,
		FirstFailureAt:  time.Date(2026, 11, 29, 11, 59, 0, 5e6, time.UTC),
		LastFailureAt:   time.Date(2026, 11, 29, 12, 0, 0, 123e6, time.UTC),
		DeadLetteredAt:  time.Date(2026, 11, 29, 12, 0, 0, 124e6, time.UTC),
		Consumer:        "billing",
		ConsumerVersion: "v1.4.2",
		Host:            "billing-7d9f",
		Traceparent:     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
}

func TestApplyWritesTypes(t *testing.T) {
	h := map[string]any{"content-type": "application/json", HeaderEventID: "e1"}
	fullRecord().Apply(h)
	want := map[string]any{
		"content-type":        "application/json",
		HeaderEventID:         "e1",
		HeaderReason:          "retries_exhausted",
		HeaderErrorType:       "*net.OpError",
		HeaderErrorMessage:    "dial tcp 10.0.0.7:5432: connect: connection refused",
		HeaderErrorStack:      "goroutine 1 [running]:\nmain.main()\n\t/app/main.go:12",
		HeaderSource:          "rabbitmq/orders.created",
		HeaderSourcePartition: int32(3),
		HeaderSourceOffset:    int64(1 << 40),
		HeaderSourceMessageID: "01936f7e-0000-7000-8000-000000000001",
		HeaderDeliveryCount:   int32(2),
		HeaderRetryCount:      int32(3),
		HeaderRedriveCount:    int32(1),
		HeaderFirstFailureAt:  "2026-11-29T11:59:00.005Z",
		HeaderLastFailureAt:   "2026-11-29T12:00:00.123Z",
		HeaderDeadLetteredAt:  "2026-11-29T12:00:00.124Z",
		HeaderConsumer:        "billing",
		HeaderConsumerVersion: "v1.4.2",
		HeaderHost:            "billing-7d9f",
		HeaderTraceparent:     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	if !reflect.DeepEqual(h, want) {
		for k := range maps.Keys(want) {
			if !reflect.DeepEqual(h[k], want[k]) {
				t.Errorf("%s = %#v, want %#v", k, h[k], want[k])
			}
		}
		for k := range maps.Keys(h) {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected header %s = %#v", k, h[k])
			}
		}
	}
}

func TestApplyTimeUTCAndMillis(t *testing.T) {
	ist := time.FixedZone("+03", 3*3600)
	r := Record{DeadLetteredAt: time.Date(2026, 11, 29, 15, 0, 0, 123456789, ist)}
	h := map[string]any{}
	r.Apply(h)
	if got := h[HeaderDeadLetteredAt]; got != "2026-11-29T12:00:00.123Z" {
		t.Errorf("dead-lettered-at = %v", got)
	}
	if got := FormatTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)); got != "2026-01-02T03:04:05.000Z" {
		t.Errorf("FormatTime = %q", got)
	}
}

func TestRoundTrip(t *testing.T) {
	records := map[string]Record{
		"full":  fullRecord(),
		"empty": {},
		"zero partition and offset": {
			Reason: ReasonPermanent, HasPartition: true, HasOffset: true,
		},
		"negative offset": {SourceOffset: -1, HasOffset: true},
		"invalid retry count": {
			Reason:        ReasonInvalidRetryCount,
			RawRetryCount: `"0" (string)`,
			DeliveryCount: 1,
		},
		"unicode": {ErrorMessage: "sipariş bulunamadı: ไม่พบ", Consumer: "ödeme"},
		"max counts": {
			RetryCount: MaxRetryCount, RedriveCount: 1<<31 - 1, DeliveryCount: 1<<31 - 1,
		},
	}
	for name, r := range records {
		t.Run(name, func(t *testing.T) {
			h := map[string]any{}
			r.Apply(h)
			got, err := Decode(h)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
			}
			if got != r {
				t.Errorf("round trip (==) differs")
			}
		})
	}
}

func TestApplyNeverTouchesOtherHeaders(t *testing.T) {
	orig := map[string]any{
		"content-type":    "application/json",
		HeaderEventID:     "e1",
		HeaderKey:         "order-1",
		HeaderType:        "OrderPlaced",
		"x-death":         []any{map[string]any{"reason": "rejected"}},
		HeaderRetryCount:  "0", // non-canonical: must survive as received
		HeaderTraceparent: "00-aaaa-bbbb-01",
	}
	h := maps.Clone(orig)
	Record{Reason: ReasonInvalidRetryCount, RawRetryCount: FormatRaw("0"), RetryCount: 0}.Apply(h)
	for k, v := range orig {
		if !reflect.DeepEqual(h[k], v) {
			t.Errorf("%s changed: %#v → %#v", k, v, h[k])
		}
	}
	if h[HeaderRawRetryCount] != `"0" (string)` {
		t.Errorf("raw retry count = %#v", h[HeaderRawRetryCount])
	}
	r, err := Decode(h)
	if err != nil {
		t.Fatalf("Decode: %v (a non-canonical count explained by the raw header is no problem)", err)
	}
	if r.RawRetryCount != `"0" (string)` || r.RetryCount != 0 || r.Traceparent != "00-aaaa-bbbb-01" {
		t.Errorf("decoded %+v", r)
	}
}

func TestApplyRemovesStaleEvidence(t *testing.T) {
	h := map[string]any{}
	fullRecord().Apply(h)
	// A second dead-lettering (after a redrive) with less evidence.
	Record{Reason: ReasonPermanent, ErrorMessage: "bad"}.Apply(h)
	for _, k := range EvidenceHeaders() {
		switch k {
		case HeaderReason, HeaderErrorMessage:
			continue
		}
		if v, ok := h[k]; ok {
			t.Errorf("stale %s = %#v", k, v)
		}
	}
	// The message's own headers stay.
	for _, k := range []string{HeaderRetryCount, HeaderRedriveCount, HeaderTraceparent} {
		if _, ok := h[k]; !ok {
			t.Errorf("%s removed", k)
		}
	}
}

func TestDecodeTolerant(t *testing.T) {
	h := map[string]any{
		HeaderReason:          []byte("delivery_limit"),
		HeaderErrorType:       []byte("*errors.errorString"),
		HeaderErrorMessage:    []byte("boom"),
		HeaderSource:          []byte("kafka/orders"),
		HeaderSourcePartition: []byte("4"),
		HeaderSourceOffset:    "12345678901",
		HeaderDeliveryCount:   int64(6),
		HeaderRedriveCount:    uint8(2),
		HeaderRetryCount:      int32(1), // only x-retry-count keeps its strict canonical type
		HeaderFirstFailureAt:  []byte("2026-11-29T12:00:00Z"),
		HeaderLastFailureAt:   "2026-11-29T15:00:00.123456+03:00",
		HeaderDeadLetteredAt:  time.Date(2026, 11, 29, 12, 0, 1, 0, time.UTC),
		HeaderHost:            []byte("h1"),
		HeaderTraceparent:     []byte("00-x-y-01"),
	}
	r, err := Decode(h)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := Record{
		Reason: ReasonDeliveryLimit, ErrorType: "*errors.errorString", ErrorMessage: "boom",
		Source: "kafka/orders", SourcePartition: 4, HasPartition: true,
		SourceOffset: 12345678901, HasOffset: true, DeliveryCount: 6, RedriveCount: 2, RetryCount: 1,
		FirstFailureAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		LastFailureAt:  time.Date(2026, 11, 29, 12, 0, 0, 123456000, time.UTC),
		DeadLetteredAt: time.Date(2026, 11, 29, 12, 0, 1, 0, time.UTC),
		Host:           "h1", Traceparent: "00-x-y-01",
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
}

func TestDecodeProblems(t *testing.T) {
	h := map[string]any{
		HeaderReason:          "exploded",
		HeaderErrorType:       int32(5),
		HeaderSourcePartition: int64(1 << 40),
		HeaderSourceOffset:    "abc",
		HeaderDeliveryCount:   int32(-2),
		HeaderRedriveCount:    true,
		HeaderFirstFailureAt:  "yesterday",
		HeaderRetryCount:      "3",
		HeaderConsumer:        "still read",
	}
	r, err := Decode(h)
	if err == nil {
		t.Fatal("Decode: nil error")
	}
	if !errors.Is(err, ErrInvalidHeader) || !errors.Is(err, ErrInvalidRetryCount) {
		t.Errorf("error wraps neither sentinel: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`x-lily-dead-letter-reason "exploded" (string): unknown reason`,
		`x-lily-error-type 5 (int32): must be text`,
		`x-lily-source-partition 1099511627776 (int64): must be in`,
		`x-lily-source-offset "abc" (string): must be an integer`,
		`x-lily-delivery-count -2 (int32)`,
		`x-lily-redrive-count true (bool)`,
		`x-lily-first-failure-at "yesterday" (string): must be an RFC 3339 time`,
		`x-retry-count "3" (string, AMQP long-string): must be an int32 (AMQP long-int) in 0..100`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 8 {
		t.Errorf("%d problems, want 8", n)
	}
	// The record is filled as far as possible.
	if r.Reason != "exploded" || r.Consumer != "still read" || r.ErrorType != "5 (int32)" {
		t.Errorf("record %+v", r)
	}
	if r.HasPartition || r.HasOffset || r.DeliveryCount != 0 || r.RetryCount != 0 {
		t.Errorf("invalid numbers decoded: %+v", r)
	}
	if r.RawRetryCount != `"3" (string)` {
		t.Errorf("RawRetryCount = %q", r.RawRetryCount)
	}
}

func TestDecodeEmpty(t *testing.T) {
	for _, h := range []map[string]any{nil, {}, {"content-type": "text/plain"}} {
		r, err := Decode(h)
		if err != nil || r != (Record{}) {
			t.Errorf("Decode(%v) = %+v, %v", h, r, err)
		}
	}
}
