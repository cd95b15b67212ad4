package rabbitmq_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestRetryCountAMQPFieldTypes publishes, with a plain AMQP client, one
// message per AMQP field type of x-retry-count. Only the long-int ('I',
// int32) in 0..100 is canonical (001_*); every other type — the other
// integer widths, the unsigned ones, floats, decimal, text, bytes, bool,
// timestamp, array, table, void — is dead-lettered invalid_retry_count
// without calling the handler, with the raw value and its type in the
// evidence and the header itself left as it was.
func TestRetryCountAMQPFieldTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("rc.types", lily.QueueConfig{RetryAttempts: 3, RetryBackoffMillis: new(int64(30))})
	tr := openDeclared(t, qc)
	_, ch := rawChannel(t)
	// name -> value, and the type the evidence must name.
	bad := []struct {
		name string
		v    any
		typ  string
	}{
		{"short-short-int b", int8(1), "(int8, AMQP short-short-int)"},
		{"short-short-uint B", uint8(1), "(uint8, AMQP short-short-uint)"},
		{"short-int s", int16(1), "(int16, AMQP short-int)"},
		{"short-uint u", uint16(1), "(uint16, AMQP short-uint)"},
		{"long-uint i", uint32(1), "(uint32, AMQP long-uint)"},
		{"long-long-int l", int64(1), "(int64, AMQP long-long-int)"},
		{"float f", float32(1), "(float32, AMQP float)"},
		{"double d", float64(1), "(float64, AMQP double)"},
		{"decimal D", amqp.Decimal{Scale: 0, Value: 1}, "1"},
		{"long-string S", "1", `"1" (string`},
		{"byte-array x", []byte("1"), `"1" ([]byte, AMQP byte-array)`},
		{"boolean t", true, "true (bool, AMQP boolean)"},
		{"timestamp T", time.Unix(1, 0).UTC(), "(time.Time, AMQP timestamp)"},
		{"field-array A", []any{int32(1)}, "AMQP field-array)"},
		{"field-table F", amqp.Table{"n": int32(1)}, "AMQP field-table)"},
		{"void V", nil, "nil"},
		{"long-int over 100", int32(101), "101 (int32, AMQP long-int)"},
		{"long-int negative", int32(-1), "-1 (int32, AMQP long-int)"},
	}
	good := map[string]int32{"long-int 0": 0, "long-int 2": 2, "long-int 100": 100}
	pub := func(id string, v any, with bool) {
		h := amqp.Table{}
		if with {
			h[evidence.HeaderRetryCount] = v
		}
		if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, amqp.Publishing{
			Headers: h, MessageId: id, DeliveryMode: amqp.Persistent, Body: []byte(id),
		}); err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
	}
	for _, b := range bad {
		pub("bad/"+b.name, b.v, true)
	}
	for name, v := range good {
		pub("good/"+name, v, true)
	}
	pub("good/absent", nil, false)
	var (
		mu    sync.Mutex
		calls = map[string]int{}
	)
	want := len(bad) + len(good) + 1
	done := func() bool {
		mu.Lock()
		acked := len(calls)
		mu.Unlock()
		n, err := tr.DeadLetterDepth(ctx, qc.Name)
		return err == nil && int(n) == len(bad) && acked == len(good)+1
	}
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		calls[d.EventID]++
		mu.Unlock()
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 2, ReceiveWait: 20 * time.Millisecond,
		Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunUntil(t, c, 30*time.Second, done)
	for id := range calls {
		if !strings.HasPrefix(id, "good/") {
			t.Errorf("handler called for %s: a non-canonical x-retry-count must be dead-lettered first", id)
		}
	}
	dls, err := tr.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(qc.Name), Limit: want})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*transport.Delivery{}
	for _, d := range dls {
		byID[d.EventID] = d
	}
	for _, b := range bad {
		d, ok := byID["bad/"+b.name]
		if !ok {
			t.Errorf("x-retry-count %s (%#v) not dead-lettered", b.name, b.v)
			continue
		}
		rec, _ := evidence.Decode(d.Headers)
		if rec.Reason != evidence.ReasonInvalidRetryCount {
			t.Errorf("%s: reason %q, want invalid_retry_count", b.name, rec.Reason)
		}
		if !strings.Contains(rec.RawRetryCount, b.typ) && !strings.Contains(rec.ErrorMessage, b.typ) {
			t.Errorf("%s: evidence raw %q / message %q does not name the raw value and type %q",
				b.name, rec.RawRetryCount, rec.ErrorMessage, b.typ)
		}
		if rec.RawRetryCount == "" {
			t.Errorf("%s: no x-lily-raw-retry-count in the evidence", b.name)
		}
	}
	// Conservation: every message is either acked (the canonical ones,
	// once each) or in the DLQ; nothing is left in the queue or buckets.
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
	if len(dls) != len(bad) {
		t.Errorf("dead-letter queue holds %d, want %d", len(dls), len(bad))
	}
	for id, n := range calls {
		if n != 1 {
			t.Errorf("%s handled %d times, want 1", id, n)
		}
	}
	if got := len(calls) + len(dls); got != want {
		t.Errorf("acked %d + dead-lettered %d = %d, want %d published", len(calls), len(dls), got, want)
	}
}
