package retry

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCheckBuckets(t *testing.T) {
	// B=1, r=0: buckets are 2^0..2^k, capped at M.
	ok := Policy{Attempts: 100, BackoffMillis: 1, MaxBackoffMillis: 1 << 31}
	if got := len(ok.Buckets()); got != 32 {
		t.Fatalf("len(Buckets()) = %d, want 32", got)
	}
	if err := CheckBuckets("orders.created", ok); err != nil {
		t.Errorf("32 buckets: %v, want nil", err)
	}
	design := Policy{Attempts: 3, BackoffMillis: 1000, MaxBackoffMillis: 60000, JitterRatio: 0.2}
	if err := CheckBuckets("orders.created", design); err != nil {
		t.Errorf("docs/design.md §5 example: %v, want nil", err)
	}
	if err := CheckBuckets("orders.created", Policy{BackoffMillis: 1000, MaxBackoffMillis: 1000}); err != nil {
		t.Errorf("no retries: %v, want nil", err)
	}

	tooMany := ok
	tooMany.MaxBackoffMillis = 1 << 32
	err := CheckBuckets("orders.created", tooMany)
	if err == nil {
		t.Fatal("33 buckets: nil error")
	}
	if !errors.Is(err, ErrInvalidPolicy) || !errors.Is(err, ErrTooManyBuckets) {
		t.Errorf("error %v does not wrap ErrInvalidPolicy and ErrTooManyBuckets", err)
	}
	for _, want := range []string{`"orders.created"`, "33", "32"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestCheckTopology(t *testing.T) {
	counts := map[string]int{}
	if err := CheckTopology(counts); err != nil {
		t.Errorf("empty topology: %v", err)
	}
	for i := range 128 {
		counts[fmt.Sprintf("q%03d", i)] = 32
	}
	if err := CheckTopology(counts); err != nil {
		t.Errorf("4096 buckets: %v, want nil", err)
	}
	counts["orders.created"] = 1
	counts["q005"] = 33 // the largest is listed first
	err := CheckTopology(counts)
	if err == nil {
		t.Fatal("4098 buckets: nil error")
	}
	if !errors.Is(err, ErrInvalidPolicy) || !errors.Is(err, ErrTooManyBuckets) {
		t.Errorf("error %v does not wrap ErrInvalidPolicy and ErrTooManyBuckets", err)
	}
	for _, want := range []string{"4098", "129 queues", "4096", "largest: q005 33, q000 32, q001 32, ..."} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
