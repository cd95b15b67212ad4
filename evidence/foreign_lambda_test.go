package evidence

import (
	"testing"
	"time"
)

// lambdaRecord is an on-failure destination record as Lambda sends it to
// SQS (AWS's documented shape).
const lambdaRecord = `{"version":"1.0","timestamp":"2026-11-14T18:16:05.568Z",
"requestContext":{"requestId":"e4b46cbf-b738-xmpl-8880-a18cdf61200e","functionArn":"arn:aws:lambda:us-east-2:123456789012:function:orders:$LATEST","condition":"RetriesExhausted","approximateInvokeCount":3},
"requestPayload":{"ORDER_IDS":["9e07af03-ce31-4ff3-xmpl-36dce652cb4f"]},
"responseContext":{"statusCode":200,"executedVersion":"$LATEST","functionError":"Unhandled"},
"responsePayload":{"errorMessage":"card declined","errorType":"PaymentError"}}`

// TestLambdaRecordDecodes: an on-failure record gives back the original
// event byte for byte and evidence: reason delivery_limit for
// RetriesExhausted, the function, the invoke count, the error and the time
// Lambda gave up; an EventAgeExceeded record is expired; a body that is not
// a record is refused.
func TestLambdaRecordDecodes(t *testing.T) {
	r, ok := DecodeLambdaRecord([]byte(lambdaRecord))
	if !ok {
		t.Fatal("the record was not recognised")
	}
	if got := string(r.Payload()); got != `{"ORDER_IDS":["9e07af03-ce31-4ff3-xmpl-36dce652cb4f"]}` {
		t.Errorf("payload %s", got)
	}
	h := r.Headers()
	if reason, ok := BrokerReason(h); !ok || reason != ReasonDeliveryLimit {
		t.Errorf("reason %s %v, want delivery_limit", reason, ok)
	}
	fe := DecodeForeign(h)
	if len(fe) != 1 {
		t.Fatalf("foreign evidence %+v, want one Lambda record", fe)
	}
	e := fe[0]
	want := time.Date(2026, 11, 14, 18, 16, 5, 568e6, time.UTC)
	if e.System != SystemLambda || e.Reason != LambdaRetriesExhausted || e.Count != 3 || e.ExceptionType != "PaymentError" ||
		e.Message != "card declined" || e.Source != "arn:aws:lambda:us-east-2:123456789012:function:orders:$LATEST" || !e.Time.Equal(want) {
		t.Errorf("evidence %+v", e)
	}
	aged, ok := DecodeLambdaRecord([]byte(`{"requestContext":{"condition":"EventAgeExceeded","approximateInvokeCount":0},"requestPayload":"plain text"}`))
	if !ok || string(aged.Payload()) != "plain text" {
		t.Fatalf("aged record: %v %q", ok, aged.Payload())
	}
	if reason, _ := BrokerReason(aged.Headers()); reason != ReasonExpired {
		t.Errorf("EventAgeExceeded: reason %s, want expired", reason)
	}
	for _, body := range []string{`{"order":1}`, `not json`, `{"requestContext":{"condition":"RetriesExhausted"}}`} {
		if _, ok := DecodeLambdaRecord([]byte(body)); ok {
			t.Errorf("%s decoded as a record", body)
		}
	}
}
