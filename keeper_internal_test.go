package lily

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
)

// countingExtender records every delivery whose lease it was asked to extend.
type countingExtender struct {
	asked []string
	each  time.Duration
}

func (e *countingExtender) ExtendLeases(_ context.Context, p *transport.ExtendParams) error {
	e.each = p.For
	for _, d := range p.Deliveries {
		e.asked = append(e.asked, d.EventID)
	}
	return nil
}

// TestExtendRenewsOnlyHalfRunLeases: the lease keeper renews a held
// delivery's lease once half of it has run, not on every check (each
// renewal is a broker request per delivery), renews it for a whole lease,
// and counts the next renewal from the time it asked.
func TestExtendRenewsOnlyHalfRunLeases(t *testing.T) {
	const lease = 10 * time.Second
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ext := &countingExtender{}
	c := &Consumer{
		o:        ConsumerOptions{Now: func() time.Time { return now }, Instance: "keeper"},
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		held:     map[*ticket]struct{}{},
		lease:    lease,
		extender: ext,
	}
	ages := map[string]time.Duration{
		"fresh": 0, "tenth": lease / 10, "just-under-half": lease/2 - time.Millisecond,
		"half": lease / 2, "nearly-out": lease - time.Millisecond,
	}
	tickets := map[string]*ticket{}
	for id, age := range ages {
		tk := &ticket{d: &transport.Delivery{Message: transport.Message{EventID: id}}, leased: now.Add(-age)}
		tickets[id] = tk
		c.held[tk] = struct{}{}
	}

	c.extend(context.Background())
	slices.Sort(ext.asked)
	if want := []string{"half", "nearly-out"}; !slices.Equal(ext.asked, want) {
		t.Fatalf("first check renewed %v, want %v (leases half run or more)", ext.asked, want)
	}
	if ext.each != lease {
		t.Errorf("renewed for %s, want a whole lease %s", ext.each, lease)
	}
	for _, id := range []string{"half", "nearly-out"} {
		if got := tickets[id].leased; !got.Equal(now) {
			t.Errorf("%s: renewal counted from %s, want the time it asked, %s", id, got, now)
		}
	}

	// Four tenths later only what has now run half is renewed: not the
	// leases renewed by the first check.
	ext.asked = nil
	now = now.Add(lease * 4 / 10)
	c.extend(context.Background())
	slices.Sort(ext.asked)
	if want := []string{"just-under-half", "tenth"}; !slices.Equal(ext.asked, want) {
		t.Fatalf("second check renewed %v, want %v", ext.asked, want)
	}
}
