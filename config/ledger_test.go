package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLedgerHorizonDefaults: unset, the horizon is 720 h, or what the
// longest-lived queue needs when that is longer; never an error.
func TestLedgerHorizonDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      int
	}{
		{"no queues", "", 720},
		{"default queue", "[[queue]]\nname = \"a\"\n", 720},
		// 2 × (0 + 720) + 0 + 24
		{"long retention", "[[queue]]\nname = \"a\"\n[[queue]]\nname = \"b\"\ndlq_retention_hours = 720\n", 1464},
		// 5 × (336 + 336) + 336 + 24: 100 retries of 12096 s (3.36 h) each
		{"long retries", "[[queue]]\nname = \"a\"\nmax_redrives = 5\nretry_attempts = 100\nretry_backoff_millis = 12096000\nmax_retry_backoff_millis = 12096000\n", 3720},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.LedgerHorizonHoursValue(); got != tc.want {
				t.Errorf("horizon %d h, want %d", got, tc.want)
			}
			if got := c.LedgerHorizon(); got != time.Duration(tc.want)*time.Hour {
				t.Errorf("LedgerHorizon %v, want %d h", got, tc.want)
			}
		})
	}
}

// TestLedgerHorizonFloor: the floor of a queue is max(max_redrives, 1) ×
// (retry span + retention) + retry span + 24 h, rounded up to an hour.
func TestLedgerHorizonFloor(t *testing.T) {
	c, err := ParseConfig([]byte("[[queue]]\nname = \"a\"\nretry_attempts = 3\n[[queue]]\nname = \"b\"\nmax_redrives = 0\ndlq_retention_hours = 48\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Queue("a")
	b, _ := c.Queue("b")
	// a: span 1+2+4 s; 2 × (7 s + 336 h) + 7 s + 24 h = 696 h 21 s → 697.
	if got := LedgerHorizonFloor(a); got != 697 {
		t.Errorf("floor of a %d, want 697", got)
	}
	// b: max_redrives 0 still allows an operator's redrive: 1 × 48 + 24.
	if got := LedgerHorizonFloor(b); got != 72 {
		t.Errorf("floor of b %d, want 72", got)
	}
}

// TestLedgerHorizonValidation: an explicit value out of range, or shorter
// than a queue needs, is refused with the key, the value and the fix.
func TestLedgerHorizonValidation(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string // substrings of the error; nil: accepted
	}{
		{"zero", "ledger_horizon_hours = 0\n", []string{"ledger_horizon_hours = 0", "must be in 1..1000000"}},
		{"negative", "ledger_horizon_hours = -3\n", []string{"ledger_horizon_hours = -3", "must be in 1..1000000"}},
		{"too long", "ledger_horizon_hours = 1000001\n", []string{"ledger_horizon_hours = 1000001", "must be in 1..1000000"}},
		{"short without queues", "ledger_horizon_hours = 1\n", nil},
		{"exactly the floor", "ledger_horizon_hours = 696\n[[queue]]\nname = \"orders\"\n", nil},
		{"below the floor", "ledger_horizon_hours = 695\n[[queue]]\nname = \"orders\"\n",
			[]string{"ledger_horizon_hours = 695", `queue "orders" needs at least 696`, "dlq_retention_hours 336", "raise ledger_horizon_hours to 696"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.doc))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if c.LedgerHorizonHours == nil || c.LedgerHorizonHoursValue() != *c.LedgerHorizonHours {
					t.Errorf("value %d, want it as written", c.LedgerHorizonHoursValue())
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
