package drill

import (
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/retry"
)

// Names are a queue's real names for its runbook, which only the caller
// knows (the transport's topology, the alert rules 'lily alerts' writes).
type Names struct {
	// Config is the configuration file as the operator names it.
	Config string
	// DeadLetter names where the queue's dead letters go before the
	// catalog (a broker's DLQ), or says they go straight into it.
	DeadLetter []string
	// Retry names the retry topology: buckets, retry topics, delays.
	Retry []string
	// Alerts are the alert names of the queue's rules.
	Alerts []string
}

// Runbook writes a runbook skeleton for q (Markdown): its names, its
// alarms and the commands to inspect, redrive and discard its dead
// letters. The parts only a team knows are left as TODO.
func Runbook(q lily.QueueConfig, n Names, o Options) string {
	s := q.Settings()
	cf := n.Config
	if cf == "" {
		cf = "lily.toml"
	}
	owner := q.Owner
	if owner == "" {
		owner = "TODO (no owner = \"team\" in its [[queue]])"
	}
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# Runbook: dead letters of %s", q.Name)
	line("")
	line("- queue: %s (transport %s, ordering %s), owner: %s", q.Name, q.Transport, orDefault(q.Ordering, lily.OrderingReorder), owner)
	line("- retries: %d, delays %s; delivery_limit %d; max_redrives %d; dead letters kept %dh (dlq_retention_hours)",
		q.RetryAttempts, delays(q.Policy()), s.DeliveryLimit, s.MaxRedrives, s.DLQRetentionHours)
	for _, r := range n.Retry {
		line("- retry topology: %s", r)
	}
	for _, d := range n.DeadLetter {
		line("- dead letters: %s", d)
	}
	line("- alerts (lily alerts --config %s): %s", cf, orDefault(strings.Join(n.Alerts, ", "), "TODO: load the rules of 'lily alerts'"))
	line("- what the alarm pages: TODO (team, channel, hours)")
	line("")
	line("## Look")
	line("1. lily dlq list --config %s", cf)
	line("2. lily dlq group --config %s --queue %s --by reason (then --by error_type, --by fingerprint, --by consumer_version)", cf, q.Name)
	line("3. lily dlq peek --config %s --queue %s; lily dlq show --config %s ID (evidence, attempts, body)", cf, q.Name, cf)
	if q.Ordering == lily.OrderingPark || q.Ordering == lily.OrderingBlock {
		line("4. lily dlq parked --config %s --queue %s (the held keys and their heads)", cf, q.Name)
	}
	line("- known failure modes and their fixes: TODO")
	line("")
	line("## Decide")
	line("- after the fix: lily dlq redrive --config %s --queue %s --dry-run, then --sample 5 --observe 5m", cf, q.Name)
	line("- cannot be fixed: lily dlq discard --config %s --queue %s --reason TEXT (a record is kept)", cf, q.Name)
	line("- a known issue, not a page: lily dlq triage --config %s --fingerprint F --status known_issue", cf)
	if q.Ordering == lily.OrderingPark {
		line("- release a parked key after the fix: lily dlq unpark --config %s --queue %s --key KEY --dry-run", cf, q.Name)
	}
	line("- the consumers fail on everything: lily queue pause --config %s --queue %s --reason TEXT; after the fix lily queue resume --config %s --queue %s", cf, q.Name, cf, q.Name)
	line("- check nothing was lost: lily reconcile --config %s", cf)
	line("")
	line("## Rehearse")
	line("- lily drill --config %s --queue %s%s (exits non-zero when a step fails)", cf, q.Name, drillFlags(o))
	return b.String()
}

// drillFlags repeats the options of this drill for the runbook.
func drillFlags(o Options) string {
	var f []string
	if o.Prometheus != "" {
		f = append(f, "--prometheus "+o.Prometheus)
	}
	if o.Alertmanager != "" {
		f = append(f, "--alertmanager "+o.Alertmanager)
	}
	if o.Console != "" {
		f = append(f, "--console "+o.Console)
	}
	if o.Finish == FinishDiscard {
		f = append(f, "--finish discard")
	}
	if len(f) == 0 {
		return ""
	}
	return " " + strings.Join(f, " ")
}

// delays lists the nominal delay before each retry of p.
func delays(p retry.Policy) string {
	if p.Attempts == 0 {
		return "none"
	}
	s := make([]string, p.Attempts)
	for n := 1; n <= p.Attempts; n++ {
		s[n-1] = (time.Duration(p.Nominal(n)) * time.Millisecond).String()
	}
	return strings.Join(s, ", ")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
