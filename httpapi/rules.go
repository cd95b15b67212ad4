package httpapi

import (
	"net/http"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/redrive/rules"
)

// CatalogRules converts a configuration's [[redrive_rule]] entries to the
// catalog's rules ('lily serve' fires them; 'lily dlq rules' and GET
// /api/rules show them).
func CatalogRules(cfg config.Config) []rules.Rule {
	out := make([]rules.Rule, 0, len(cfg.RedriveRules))
	for _, rc := range cfg.RedriveRules {
		s := rc.Settings()
		out = append(out, rules.Rule{Name: s.Name, Queue: s.Queue, When: s.When, Reason: s.Reason, Fingerprint: s.Fingerprint,
			MinConsumerVersion: s.MinConsumerVersion, Lookback: s.Lookback, MaxAge: s.MaxAge, Sample: s.Sample, Observe: s.Observe,
			Rate: s.Rate, Limit: s.Limit})
	}
	return out
}

// RulesView is 'lily dlq rules --dry-run --json' and GET /api/rules: the
// rules, what each would do now, and the firings so far.
type RulesView struct {
	DryRun  bool                       `json:"dry_run"`
	Rules   []config.RedriveRuleConfig `json:"rules"`
	Plans   []rules.Plan               `json:"plans"`
	Firings []rules.Firing             `json:"firings"`
}

// handleRules is 'lily dlq rules --dry-run': it changes nothing.
func (s *Server) handleRules(w http.ResponseWriter, r *http.Request, _ *principal) {
	out := RulesView{DryRun: true, Rules: s.o.Config.RedriveRules, Plans: []rules.Plan{}}
	if out.Rules == nil {
		out.Rules = []config.RedriveRuleConfig{}
	}
	var err error
	if rs := CatalogRules(s.o.Config); len(rs) > 0 {
		if out.Plans, err = rules.New(s.o.Store).Plan(r.Context(), rs, s.o.Now()); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if out.Firings, err = rules.New(s.o.Store).Firings(r.Context(), ""); err != nil {
		s.fail(w, r, err)
		return
	}
	if out.Firings == nil {
		out.Firings = []rules.Firing{}
	}
	writeJSON(w, http.StatusOK, out)
}
