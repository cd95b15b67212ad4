package drill_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/drill"
)

// TestCheckRefusesOrderedQueues: park and block are refused with an
// error naming the queue, the value and the fix, unless AllowOrdered;
// reorder is not.
func TestCheckRefusesOrderedQueues(t *testing.T) {
	for _, ordering := range []string{lily.OrderingPark, lily.OrderingBlock} {
		q := lily.QueueConfig{Name: "orders.created", Ordering: ordering}.WithDefaults()
		err := drill.Check(q, drill.Options{})
		if !errors.Is(err, drill.ErrOrdered) {
			t.Fatalf("%s: Check = %v, want ErrOrdered", ordering, err)
		}
		for _, want := range []string{"queue orders.created", `ordering = "` + ordering + `"`, "--allow-ordered"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name %q", ordering, err, want)
			}
		}
		if err := drill.Check(q, drill.Options{AllowOrdered: true}); err != nil {
			t.Errorf("%s with AllowOrdered: %v", ordering, err)
		}
		// Run refuses before it touches the environment (none is given).
		if _, err := drill.Run(context.Background(), drill.Env{Queue: q}, drill.Options{}); !errors.Is(err, drill.ErrOrdered) {
			t.Errorf("%s: Run = %v, want ErrOrdered", ordering, err)
		}
	}
	if err := drill.Check(lily.QueueConfig{Name: "q"}.WithDefaults(), drill.Options{}); err != nil {
		t.Errorf("reorder: %v", err)
	}
}

// TestRunRefusesBadInput: an unknown finish mode and a missing
// environment are errors, not a report.
func TestRunRefusesBadInput(t *testing.T) {
	q := lily.QueueConfig{Name: "q"}.WithDefaults()
	if _, err := drill.Run(context.Background(), drill.Env{Queue: q}, drill.Options{Finish: "keep"}); err == nil || !strings.Contains(err.Error(), `finish "keep"`) {
		t.Errorf("Finish keep: %v, want an error naming it", err)
	}
	if _, err := drill.Run(context.Background(), drill.Env{Queue: q}, drill.Options{}); err == nil || !strings.Contains(err.Error(), "publisher") {
		t.Errorf("no environment: %v, want an error naming what is missing", err)
	}
}
