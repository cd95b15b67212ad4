package config

import (
	"strings"
	"testing"
)

func TestRedriveRulesValidated(t *testing.T) {
	t.Parallel()
	good := `
[[queue]]
name = "orders.created"

[[redrive_rule]]
name = "after-outage"
queue = "orders.created"
when = "breaker_closed"
lookback = "2m"

[[redrive_rule]]
name = "currency-fix"
queue = "orders.created"
when = "consumer_version"
reason = "permanent"
fingerprint = "3f2a"
min_consumer_version = "1.10.0"
sample = 0
rate = 0
`
	c, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	s := c.RedriveRules[0].Settings()
	if s.Reason != "retries_exhausted" || s.Sample != DefaultRuleSample || s.Rate != DefaultRuleRate || s.Lookback.Minutes() != 2 || s.MaxAge.Hours() != 24 || s.Observe.Minutes() != 1 {
		t.Errorf("defaults: %+v", s)
	}
	if s := c.RedriveRules[1].Settings(); s.Sample != 0 || s.Rate != 0 || s.Reason != "permanent" {
		t.Errorf("explicit zeros: %+v", s)
	}
	bad := `
[[queue]]
name = "orders.created"

[[redrive_rule]]
name = "r1"
queue = "nope"
when = "sometimes"
reason = "oops"
lookback = "soon"

[[redrive_rule]]
name = "r1"
queue = "orders.created"
when = "consumer_version"
sample = -1
rate = -2
limit = -3
observe = "0s"
`
	_, err = ParseConfig([]byte(bad))
	if err == nil {
		t.Fatal("bad rules accepted")
	}
	for _, want := range []string{
		`redrive_rule 1 ("r1"): queue = "nope": is not a [[queue]]`,
		`when = "sometimes": must be "breaker_closed" or "consumer_version"`,
		`reason = "oops": must be a dead-letter reason`,
		`lookback = "soon": want a duration`,
		`redrive_rule 2 ("r1"): name = "r1": is used by another`,
		`fingerprint = "": is required with when = "consumer_version"`,
		`min_consumer_version = "": is required`,
		`sample = -1: must be >= 0`,
		`rate = -2: must be >= 0`,
		`limit = -3: must be >= 0`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestEditQueuesValidated(t *testing.T) {
	t.Parallel()
	cfg := `
[[queue]]
name = "orders.created"
content_type = "application/json"

[[queue]]
name = "raw"
content_type = "image png"

[[token]]
name = "vera"
role = "viewer"
secret = "viewer-secret-0123456789"
edit_queues = ["orders.created"]

[[token]]
name = "otto"
role = "operator"
secret = "operator-secret-0123456789"
edit_queues = ["payments", ""]
`
	_, err := ParseConfig([]byte(cfg))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`token 1 ("vera"): edit_queues = ["orders.created"]: role "viewer" cannot edit`,
		`token 2 ("otto"): edit_queues = "payments": must name a [[queue]]`,
		`token 2 ("otto"): edit_queues = "": must name`,
		`queue "raw": content_type = "image png"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	ok := TokenConfig{Name: "e", Role: RoleOperator, EditQueues: []string{"orders.created"}}
	if !ok.CanEdit("orders.created") || ok.CanEdit("payments") || !(TokenConfig{EditQueues: []string{"*"}}).CanEdit("x") || (TokenConfig{}).CanEdit("x") {
		t.Error("CanEdit")
	}
}
