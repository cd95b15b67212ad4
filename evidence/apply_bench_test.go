package evidence

import (
	"testing"
	"time"
)

// BenchmarkApplyDeadLetter applies the evidence of a typical first-time
// dead letter (all three times the same instant) to a copy's headers.
func BenchmarkApplyDeadLetter(b *testing.B) {
	now := time.Date(2026, 11, 29, 15, 0, 0, 123e6, time.UTC)
	r := Record{Reason: ReasonPermanent, ErrorType: "*errors.errorString", ErrorMessage: "bench: permanent",
		Source: "rabbitmq/orders.created", SourceMessageID: "0190b7f2-3c4d-7e8f-9a0b-1c2d3e4f5a6b", DeliveryCount: 1,
		FirstFailureAt: now, LastFailureAt: now, DeadLetteredAt: now, Consumer: "orders", Host: "worker-1"}
	for b.Loop() {
		h := make(map[string]any, 24)
		r.Apply(h)
	}
}
