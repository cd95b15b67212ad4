package config

import (
	"fmt"
	"math"
	"time"

	"github.com/lily-mq/lily"
)

// Limits of ledger_horizon_hours (docs/ledger.md).
const (
	// DefaultLedgerHorizonHours is the ledger's deduplication horizon when
	// ledger_horizon_hours is unset and no queue needs a longer one
	// (LedgerHorizonFloor): 30 days, ledger.DefaultHorizon.
	DefaultLedgerHorizonHours = 720
	// MaxLedgerHorizonHours is the longest horizon accepted (about 114
	// years: "never prune"), far below time.Duration's limit.
	MaxLedgerHorizonHours = 1_000_000
	// LedgerHorizonMarginHours is added to what the queue settings need,
	// for a backlog in the queue and broker redeliveries (a consumer that
	// held a message until its session or lease ended).
	LedgerHorizonMarginHours = 24
)

// LedgerHorizonFloor is the shortest deduplication horizon that queue q
// needs, rounded up to whole hours: the longest time after which the same
// message can come back to Lily and must be recognised, not counted again.
// A message is accepted, retried for up to the retry span S (the nominal
// delays, stretched by the jitter), dead-lettered, redriven within its
// dlq_retention_hours R, and so on up to max_redrives M times (at least
// once: an operator may still redrive a needs_manual entry), then retried
// once more: M·(S+R) + S, plus LedgerHorizonMarginHours.
func LedgerHorizonFloor(q lily.QueueConfig) int {
	s := q.Settings()
	spanH := float64(q.Policy().Span()) * (1 + q.RetryJitterRatio) / float64(time.Hour/time.Millisecond)
	m := float64(max(s.MaxRedrives, 1))
	h := m*(spanH+float64(s.DLQRetentionHours)) + spanH + LedgerHorizonMarginHours
	if h >= math.MaxInt32 || math.IsNaN(h) {
		return math.MaxInt32
	}
	return int(math.Ceil(h))
}

// ledgerHorizonNeeded is the longest LedgerHorizonFloor of c's valid
// queues (0 without any), and the queue that needs it.
func (c Config) ledgerHorizonNeeded() (int, string) {
	need, by := 0, ""
	for _, q := range c.Queues {
		if q.Validate() != nil {
			continue // reported on its own
		}
		if f := LedgerHorizonFloor(q); f > need {
			need, by = f, q.Name
		}
	}
	return need, by
}

// LedgerHorizonHoursValue returns ledger_horizon_hours as written, or, when
// it is unset, DefaultLedgerHorizonHours or the longest horizon a queue
// needs (LedgerHorizonFloor), whichever is longer, capped at
// MaxLedgerHorizonHours.
func (c Config) LedgerHorizonHoursValue() int {
	if c.LedgerHorizonHours != nil {
		return *c.LedgerHorizonHours
	}
	need, _ := c.ledgerHorizonNeeded()
	return min(max(DefaultLedgerHorizonHours, need), MaxLedgerHorizonHours)
}

// LedgerHorizon is LedgerHorizonHoursValue as a duration, for
// ledger.Ledger.SetHorizon.
func (c Config) LedgerHorizon() time.Duration {
	return time.Duration(c.LedgerHorizonHoursValue()) * time.Hour
}

// validateLedger reports a ledger_horizon_hours out of range, or shorter
// than a queue needs (a message coming back after its ledger rows were
// pruned would be counted twice and reconcile would show a false loss).
// An unset one is derived from the queues and always fits.
func (c Config) validateLedger() []error {
	if c.LedgerHorizonHours == nil {
		return nil
	}
	h := *c.LedgerHorizonHours
	if h < 1 || h > MaxLedgerHorizonHours {
		return []error{fmt.Errorf("%w: ledger_horizon_hours = %d: must be in 1..%d (how long the ledger remembers each message to count it once; leave it unset for %d or what the queues need)",
			ErrInvalidConfig, h, MaxLedgerHorizonHours, DefaultLedgerHorizonHours)}
	}
	need, by := c.ledgerHorizonNeeded()
	if h >= need {
		return nil
	}
	q, _ := c.Queue(by)
	s := q.Settings()
	return []error{fmt.Errorf("%w: ledger_horizon_hours = %d: queue %q needs at least %d: its messages can come back that long after they were accepted (max(max_redrives %d, 1) × (retry span + dlq_retention_hours %d) + retry span + %d h margin), and a message seen again after its ledger rows were pruned is counted twice; raise ledger_horizon_hours to %d or more (or leave it unset), or lower the queue's dlq_retention_hours or max_redrives",
		ErrInvalidConfig, h, by, need, s.MaxRedrives, s.DLQRetentionHours, LedgerHorizonMarginHours, need)}
}
