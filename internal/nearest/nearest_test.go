package nearest_test

import (
	"fmt"
	"testing"

	"github.com/lily-mq/lily/internal/nearest"
)

func TestName(t *testing.T) {
	known := []string{"orders.created", "payments.captured"}
	for _, c := range []struct{ in, want string }{
		{"orders.craeted", "orders.created"},
		{"payments.capture", "payments.captured"},
		{"inventory", ""},
	} {
		if got := nearest.Name(c.in, known, 3); got != c.want {
			t.Errorf("Name(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func ExampleDistance() {
	fmt.Println(nearest.Distance("retries_exhaustd", "retries_exhausted"))
	// Output: 1
}
