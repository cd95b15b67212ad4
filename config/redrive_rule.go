package config

import (
	"fmt"
	"time"

	"github.com/lily-mq/lily/evidence"
)

// The triggers of a [[redrive_rule]].
const (
	// TriggerBreakerClosed fires when a circuit breaker of the queue
	// closes after an outage (it opened, then a probe succeeded), as the
	// runtime records it in the catalog (rules.RuntimeRecorder). It
	// redrives the entries dead-lettered from lookback before the breaker
	// opened until it closed.
	TriggerBreakerClosed = "breaker_closed"
	// TriggerConsumerVersion fires when a consumer of version >=
	// min_consumer_version has acked messages of the queue (recorded by
	// rules.RuntimeRecorder): the fix runs. It redrives the entries of
	// the fingerprint dead-lettered before that version first acked.
	TriggerConsumerVersion = "consumer_version"
)

// Defaults of a [[redrive_rule]].
const (
	DefaultRuleReason  = "retries_exhausted"
	DefaultRuleSample  = 5
	DefaultRuleObserve = "1m"
	DefaultRuleRate    = 100.0
	DefaultRuleMaxAge  = "24h"
)

// RedriveRuleConfig is one [[redrive_rule]] entry: a redrive that 'lily
// serve' starts by itself, as an ordinary redrive job (dry run recorded
// first, sample, rate, max_redrives, audit), once per occurrence of its
// trigger. Rules are off unless configured.
type RedriveRuleConfig struct {
	// Name identifies the rule in the audit log (actor "rule:<name>") and
	// in 'lily dlq rules'. Required, unique.
	Name string `toml:"name" json:"name"`
	// Queue is the source queue whose entries the rule redrives (a
	// [[queue]] of the file when it declares any). Required.
	Queue string `toml:"queue" json:"queue"`
	// When is the trigger: "breaker_closed" or "consumer_version".
	// Required.
	When string `toml:"when" json:"when"`
	// Reason is the dead-letter reason of the entries redriven. The rule
	// never takes other reasons: "permanent" or "delivery_limit" entries
	// go only when named here. Defaults to "retries_exhausted".
	Reason string `toml:"reason" json:"reason"`
	// Fingerprint, if set, keeps only the entries with this error message
	// fingerprint ('lily dlq group --by fingerprint'). Required for
	// "consumer_version". Defaults to "" (any).
	Fingerprint string `toml:"fingerprint" json:"fingerprint,omitempty"`
	// MinConsumerVersion is the version that fixes the failure (dotted
	// numbers compare numerically: "1.10.0" > "1.9.3"). Required for
	// "consumer_version". Defaults to "".
	MinConsumerVersion string `toml:"min_consumer_version" json:"min_consumer_version,omitempty"`
	// Lookback widens an outage's window before the breaker opened (the
	// failures that opened it), a Go duration. Defaults to "0s".
	Lookback string `toml:"lookback" json:"lookback,omitempty"`
	// MaxAge is how recent a trigger must be to fire (an outage that
	// ended, a version that first acked, longer ago is ignored), a Go
	// duration. Defaults to "24h".
	MaxAge string `toml:"max_age" json:"max_age,omitempty"`
	// Sample entries are sent first and must be acked within Observe
	// before the rest goes; 0 sends no sample. Defaults to 5.
	Sample *int `toml:"sample" json:"sample,omitempty"`
	// Observe is how long the sample is watched, a Go duration. Defaults
	// to "1m".
	Observe string `toml:"observe" json:"observe,omitempty"`
	// Rate is the most messages per second after the sample; 0 means no
	// limit. Defaults to 100.
	Rate *float64 `toml:"rate" json:"rate,omitempty"`
	// Limit caps the entries one firing handles; 0 means all. Defaults
	// to 0.
	Limit int `toml:"limit" json:"limit,omitempty"`
}

// RuleSettings is a [[redrive_rule]] with its defaults applied and its
// durations parsed.
type RuleSettings struct {
	Name, Queue, When, Reason       string
	Fingerprint, MinConsumerVersion string
	Lookback, MaxAge, Observe       time.Duration
	Sample, Limit                   int
	Rate                            float64
}

// Settings returns the rule's settings, defaults applied. Call it on a
// validated rule (durations that do not parse are zero).
func (r RedriveRuleConfig) Settings() RuleSettings {
	s := RuleSettings{Name: r.Name, Queue: r.Queue, When: r.When, Reason: r.Reason, Fingerprint: r.Fingerprint,
		MinConsumerVersion: r.MinConsumerVersion, Sample: DefaultRuleSample, Rate: DefaultRuleRate, Limit: r.Limit}
	if s.Reason == "" {
		s.Reason = DefaultRuleReason
	}
	if r.Sample != nil {
		s.Sample = *r.Sample
	}
	if r.Rate != nil {
		s.Rate = *r.Rate
	}
	s.Lookback, _ = parseRuleDuration(r.Lookback, "0s")
	s.MaxAge, _ = parseRuleDuration(r.MaxAge, DefaultRuleMaxAge)
	s.Observe, _ = parseRuleDuration(r.Observe, DefaultRuleObserve)
	return s
}

func parseRuleDuration(s, def string) (time.Duration, error) {
	if s == "" {
		s = def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration >= 0 such as 30s, 10m or 24h")
	}
	return d, nil
}

var ruleReasons = map[string]bool{}

func init() {
	for _, r := range []evidence.Reason{evidence.ReasonPermanent, evidence.ReasonRetriesExhausted, evidence.ReasonDeliveryLimit,
		evidence.ReasonInvalidRetryCount, evidence.ReasonExpired, evidence.ReasonMaxLen, evidence.ReasonUnroutable, evidence.ReasonRejected} {
		ruleReasons[string(r)] = true
	}
}

// validateRules reports every problem of the [[redrive_rule]] entries.
func (c Config) validateRules() []error {
	var errs []error
	seen := map[string]bool{}
	for i, r := range c.RedriveRules {
		bad := func(field string, value any, rule string) {
			errs = append(errs, fmt.Errorf("%w: redrive_rule %d (%q): %s = %v: %s", ErrInvalidConfig, i+1, r.Name, field, value, rule))
		}
		if !tokenName.MatchString(r.Name) {
			bad("name", fmt.Sprintf("%q", r.Name), "must be 1..64 characters of letters, digits, '.', '_', '@' or '-' (the audit log names the rule by it)")
		} else if seen[r.Name] {
			bad("name", fmt.Sprintf("%q", r.Name), "is used by another [[redrive_rule]]: names must be unique")
		}
		seen[r.Name] = true
		if r.Queue == "" {
			bad("queue", `""`, "is required: the source queue whose entries the rule redrives")
		} else if _, ok := c.Queue(r.Queue); !ok && len(c.Queues) > 0 {
			bad("queue", fmt.Sprintf("%q", r.Queue), "is not a [[queue]] of this file: name one of them")
		}
		switch r.When {
		case TriggerBreakerClosed:
		case TriggerConsumerVersion:
			if r.Fingerprint == "" {
				bad("fingerprint", `""`, `is required with when = "consumer_version": the failure the new version fixes ('lily dlq group --by fingerprint')`)
			}
			if r.MinConsumerVersion == "" {
				bad("min_consumer_version", `""`, `is required with when = "consumer_version": the version that fixes it, e.g. "1.4.0"`)
			}
		default:
			bad("when", fmt.Sprintf("%q", r.When), `must be "breaker_closed" or "consumer_version"`)
		}
		if r.When != TriggerConsumerVersion && r.MinConsumerVersion != "" {
			bad("min_consumer_version", fmt.Sprintf("%q", r.MinConsumerVersion), `only applies to when = "consumer_version": remove it`)
		}
		if r.Reason != "" && !ruleReasons[r.Reason] {
			bad("reason", fmt.Sprintf("%q", r.Reason), "must be a dead-letter reason: retries_exhausted (default), permanent, delivery_limit, invalid_retry_count, expired, maxlen, unroutable or rejected")
		}
		for _, d := range []struct{ field, v, def string }{{"lookback", r.Lookback, "0s"}, {"max_age", r.MaxAge, DefaultRuleMaxAge}, {"observe", r.Observe, DefaultRuleObserve}} {
			if _, err := parseRuleDuration(d.v, d.def); err != nil {
				bad(d.field, fmt.Sprintf("%q", d.v), err.Error())
			}
		}
		s := r.Settings()
		if s.Sample < 0 {
			bad("sample", s.Sample, "must be >= 0 (0: no sample)")
		}
		if s.Sample > 0 && s.Observe <= 0 {
			bad("observe", fmt.Sprintf("%q", r.Observe), "must be > 0 with a sample: how long the sample must be acked within")
		}
		if s.Rate < 0 {
			bad("rate", s.Rate, "must be >= 0 messages per second (0: no limit)")
		}
		if r.Limit < 0 {
			bad("limit", r.Limit, "must be >= 0 (0: all that match)")
		}
	}
	return errs
}
