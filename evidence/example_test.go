package evidence_test

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/lily-mq/lily/evidence"
)

// A consumer dead-letters a message: it scrubs the record, then writes it beside the
// original headers.
func ExampleRecord_Apply() {
	h := map[string]any{
		evidence.HeaderEventID: "01936f7e-8a2b-7c3d-9e4f-0a1b2c3d4e5f",
		"content-type":         "application/json",
	}
	rec := evidence.Record{
		Reason:         evidence.ReasonPermanent,
		ErrorType:      "*url.Error",
		ErrorMessage:   "post https://bob:hunter2@pay.example/charge: 402",
		Source:         "sqlite/orders.created",
		DeliveryCount:  1,
		DeadLetteredAt: time.Date(2026, 11, 29, 12, 0, 0, 123e6, time.UTC),
		Consumer:       "billing",
	}
	var redactor *evidence.Redactor // nil: the default rules
	redactor.Scrub(&rec)
	rec.Apply(h)

	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%s: %v (%T)\n", k, h[k], h[k])
	}
	back, err := evidence.Decode(h)
	fmt.Println("round trip:", back == rec, err)
	// Output:
	// content-type: application/json (string)
	// x-lily-consumer: billing (string)
	// x-lily-dead-letter-reason: permanent (string)
	// x-lily-dead-lettered-at: 2026-11-29T12:00:00.123Z (string)
	// x-lily-delivery-count: 1 (int32)
	// x-lily-error-message: post https://bob:***@pay.example/charge: 402 (string)
	// x-lily-error-type: *url.Error (string)
	// x-lily-event-id: 01936f7e-8a2b-7c3d-9e4f-0a1b2c3d4e5f (string)
	// x-lily-source: sqlite/orders.created (string)
	// round trip: true <nil>
}

func ExampleRetryCount() {
	for _, v := range []any{nil, int32(3), "0", int32(-1), 3.0, int64(2)} {
		h := map[string]any{}
		if v != nil {
			h[evidence.HeaderRetryCount] = v
		}
		n, err := evidence.RetryCount(h)
		fmt.Println(n, err, errors.Is(err, evidence.ErrInvalidRetryCount))
	}
	// Output:
	// 0 <nil> false
	// 3 <nil> false
	// 0 x-retry-count "0" (string, AMQP long-string): must be an int32 (AMQP long-int) in 0..100 true
	// 0 x-retry-count -1 (int32, AMQP long-int): must be an int32 (AMQP long-int) in 0..100 true
	// 0 x-retry-count 3 (float64, AMQP double): must be an int32 (AMQP long-int) in 0..100 true
	// 0 x-retry-count 2 (int64, AMQP long-long-int): must be an int32 (AMQP long-int) in 0..100 true
}

func ExampleRedactor_Redact() {
	r, err := evidence.NewRedactor(`ssn=(\d+)`)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Redact("dial amqp://app:s3cret@mq:5672/: refused"))
	fmt.Println(r.Redact("Authorization: Bearer eyJhbGciOi.payload.sig"))
	fmt.Println(r.Redact(`{"password": "hunter2", "user": "bob"}`))
	fmt.Println(r.Redact("card 4111 1111 1111 1111, order 4111111111111112"))
	fmt.Println(r.Redact("ssn=123456789"))
	// Output:
	// dial amqp://app:***@mq:5672/: refused
	// Authorization: Bearer ***
	// {"password": "***", "user": "bob"}
	// card ****1111, order 4111111111111112
	// ssn=***
}

func ExampleFingerprint() {
	fmt.Println(evidence.Fingerprint("order 12345 not found"))
	fmt.Println(evidence.Fingerprint("order 99 not found"))
	fmt.Println(evidence.Fingerprint(`invalid currency "XXX" for 550e8400-e29b-41d4-a716-446655440000`))
	// Output:
	// order <n> not found
	// order <n> not found
	// invalid currency <q> for <id>
}

func ExampleDecodeForeign() {
	h := map[string]any{
		"x-death": []any{map[string]any{
			"count": int64(1), "reason": "delivery_limit", "queue": "billing.order-placed",
			"exchange": "", "routing-keys": []any{"billing.order-placed"},
		}},
		"x-first-death-reason":   "delivery_limit",
		"x-first-death-queue":    "billing.order-placed",
		"MT-Fault-ExceptionType": "System.InvalidOperationException",
		"MT-Fault-Message":       []byte("Unsupported currency XXX"),
	}
	for _, e := range evidence.DecodeForeign(h) {
		fmt.Printf("%s %s: reason=%q source=%q count=%d type=%q message=%q\n",
			e.System, e.Origin, e.Reason, e.Source, e.Count, e.ExceptionType, e.Message)
	}
	r, ok := evidence.BrokerReason(h)
	fmt.Println(r, ok)
	// Output:
	// rabbitmq x-death[0]: reason="delivery_limit" source="billing.order-placed" count=1 type="" message=""
	// rabbitmq x-first-death-*: reason="delivery_limit" source="billing.order-placed" count=0 type="" message=""
	// masstransit MT-Fault-*: reason="" source="" count=0 type="System.InvalidOperationException" message="Unsupported currency XXX"
	// delivery_limit true
}

// Each copy of a failing message adds its attempt to the history it carries;
// the dead letter shows them all, the first and the most recent kept.
func ExampleAddAttempt() {
	h := map[string]any{}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for n, msg := range []string{"connection refused", "password=hunter2 rejected", "timeout"} {
		rec := evidence.Record{ErrorType: "*net.OpError", ErrorMessage: msg, RetryCount: n, DeliveryCount: 1,
			LastFailureAt: t0.Add(time.Duration(n) * time.Minute)}
		var redactor *evidence.Redactor // nil: the default rules
		redactor.Scrub(&rec)
		outcome := evidence.OutcomeRetry
		if n == 2 {
			outcome = evidence.OutcomeDeadLetter
		}
		evidence.AddAttempt(h, rec.Attempt(outcome))
	}
	hist, err := evidence.DecodeAttempts(h)
	fmt.Println(err, hist.Dropped)
	for _, a := range hist.Attempts {
		fmt.Println(evidence.FormatTime(a.At), a.RetryCount, a.Outcome, a.ErrorType+": "+a.ErrorMessage)
	}
	// Output:
	// <nil> 0
	// 2026-11-29T12:00:00.000Z 0 retry *net.OpError: connection refused
	// 2026-11-29T12:01:00.000Z 1 retry *net.OpError: password=*** rejected
	// 2026-11-29T12:02:00.000Z 2 dead_letter *net.OpError: timeout
}
