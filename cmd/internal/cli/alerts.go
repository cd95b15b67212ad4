package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lilyprom"
)

func init() { register(newAlertsCmd) }

// alertOptions are the thresholds of 'lily alerts'.
type alertOptions struct {
	config      string        // the configuration file, as given (runbooks name it)
	dlqFloor    int           // LilyDLQNotEmpty fires above this many held entries
	spikeFactor float64       // LilyDLQInflowSpike: this many times the baseline rate
	spikeMin    int           // ... and at least this many dead letters in the window
	breakerFor  time.Duration // LilyBreakerOpenTooLong fires after this long not closed
	keyHeldFor  time.Duration // LilyKeysHeld fires after a key was held this long
	brokerFor   time.Duration // LilyBrokerDLQNotIngested: dead letters in the broker, none ingested, this long
	outboxAge   time.Duration // LilyOutboxStalled: the oldest unpublished outbox row is older than this
	outbox      bool          // the configuration names an outbox (outbox_url): outbox rules too
}

// Windows of the inflow-spike rule: the recent window is compared with the
// baseline window just before it.
const (
	spikeWindow   = 10 * time.Minute
	spikeBaseline = 6 * time.Hour
	// ledgerFor lets a ledger read during traffic settle: its figures are
	// read one after another, so a busy queue can be off for one scrape.
	ledgerFor = 10 * time.Minute
	// absentFor is how long a queue's catalog metrics may be missing.
	absentFor = 15 * time.Minute
	// unowned is the owner label of a queue without an owner.
	unowned = "unowned"
)

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

// ruleGroup is one group of rules: one per queue.
type ruleGroup struct {
	Name  string      `json:"name"`
	Rules []alertRule `json:"rules"`
}

// alertRule is one alerting rule.
type alertRule struct {
	Alert       string          `json:"alert"`
	Expr        string          `json:"expr"`
	For         string          `json:"for,omitempty"`
	Labels      alertLabels     `json:"labels"`
	Annotations alertAnnotation `json:"annotations"`
}

type alertLabels struct {
	Severity string `json:"severity"`
	Queue    string `json:"queue"`
	Owner    string `json:"owner"`
}

type alertAnnotation struct {
	Summary     string `json:"summary"`
	Description string `json:"description"`
	Runbook     string `json:"runbook"`
}

func newAlertsCmd() *cobra.Command {
	var (
		o      alertOptions
		out    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "alerts --config FILE [--out FILE]",
		Short: "Write Prometheus alerting rules for every configured queue, with its owner and a runbook",
		Long: `Write Prometheus alerting rules (a rule file for rule_files) on the metrics of
package lilyprom, one group per [[queue]] of the configuration. Every alert has
the labels severity, queue and owner (the queue's owner, or "unowned") and the
annotations summary, description and runbook (the lily command to run first).

  LilyDLQNotEmpty                warning   held dead letters (pending, parked,
                                           needs_manual) above --dlq-floor, not
                                           counting those triaged known_issue
                                           (lily_dlq_alarming_entries)
  LilyDLQInflowSpike             critical  dead letters in the last 10m at
                                           --spike-factor times the rate of the
                                           6h before, and at least --spike-min
  LilyDLQEntryPastHalfRetention  critical  the oldest held entry is past half
                                           its dlq_retention_hours
  LilyLedgerUnaccounted          critical  'lily reconcile' lost > 0 for 10m
  LilyBreakerOpenTooLong         critical  the circuit breaker not closed for
                                           --breaker-open-for (queues with a
                                           breaker only)
  LilyKeysHeld                   warning   a key parked or blocked for
                                           --key-held-for (queues with ordering
                                           park or block only)
  LilyBrokerDLQNotIngested       critical  dead letters waiting in the broker's
                                           DLQ (lily_broker_dlq_messages > 0)
                                           and none ingested for
                                           --broker-dlq-for: the continuous
                                           ingest of 'lily serve' stopped
                                           (queues on RabbitMQ or Kafka only)
  LilyDLQMetricsAbsent           warning   no lily_dlq_entries of the queue for
                                           15m: the DLQ alerts above are blind
  LilyOutboxStalled              critical  the oldest unpublished outbox row of
                                           the queue is older than --outbox-age:
                                           no relay runs or its publishes fail
                                           (only with outbox_url configured)
  LilyOutboxMetricsAbsent        warning   no lily_outbox_pending of the queue
                                           for 15m: no 'lily relay --metrics'
                                           is scraped (only with outbox_url)

Check the file with 'promtool check rules FILE' before Prometheus loads it.
Regenerate it when the configuration changes (retention, owner, breaker).`,
		Example: `  lily alerts --config lily.toml --out /etc/prometheus/rules/lily.yml
  lily alerts --config lily.toml --dlq-floor 10 --breaker-open-for 30m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			cfg, err := config.LoadConfig(o.config)
			if err != nil {
				return err
			}
			if len(cfg.Queues) == 0 {
				return usagef("alerts: --config %s has no [[queue]] entries: the rules are written per queue", o.config)
			}
			o.outbox = cfg.OutboxURL != ""
			rf := alertRules(cfg, o)
			for _, q := range cfg.Queues {
				if q.Owner == "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "lily alerts: queue %s has no owner: its alerts carry owner=%q (set owner = \"team\" in its [[queue]])\n", q.Name, unowned)
				}
			}
			var b bytes.Buffer
			if asJSON {
				err = report.JSON(&b, rf)
			} else {
				err = writeRulesYAML(&b, rf, o.config)
			}
			if err != nil {
				return err
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(b.Bytes())
				return err
			}
			if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
				return fmt.Errorf("alerts: write the rules: %w", err)
			}
			n := 0
			for _, g := range rf.Groups {
				n += len(g.Rules)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d alerting rules for %d queues to %s (check it with: promtool check rules %s)\n",
				n, len(rf.Groups), out, out)
			return nil
		},
	}
	fl := cmd.Flags()
	configFlag(fl, &o.config, "", "Lily configuration file (TOML) whose [[queue]] entries get rules (required)")
	fl.StringVar(&out, "out", "", "write the rules to this file instead of standard output")
	fl.IntVar(&o.dlqFloor, "dlq-floor", 0, "LilyDLQNotEmpty fires when more than this many dead letters are held")
	fl.Float64Var(&o.spikeFactor, "spike-factor", 3, "LilyDLQInflowSpike: the last 10m's inflow rate against the 6h before it, as a multiple (>= 1)")
	fl.IntVar(&o.spikeMin, "spike-min", 10, "LilyDLQInflowSpike: and at least this many dead letters in the last 10m (>= 1)")
	fl.DurationVar(&o.breakerFor, "breaker-open-for", 15*time.Minute, "LilyBreakerOpenTooLong: how long the breaker may stay open or half-open")
	fl.DurationVar(&o.keyHeldFor, "key-held-for", 10*time.Minute, "LilyKeysHeld: how long a key may stay parked or blocked")
	fl.DurationVar(&o.brokerFor, "broker-dlq-for", 5*time.Minute,
		"LilyBrokerDLQNotIngested: how long dead letters may wait in a broker DLQ with none ingested (>= 2m)")
	fl.DurationVar(&o.outboxAge, "outbox-age", 5*time.Minute,
		"LilyOutboxStalled: how old the oldest unpublished outbox row may get (>= 1m; with outbox_url configured)")
	jsonFlag(fl, &asJSON, "write the rules as JSON (the same structure; Prometheus reads it too)")
	return cmd
}

func (o alertOptions) validate() error {
	switch {
	case o.config == "":
		return usagef("alerts: --config FILE is required: the rules are written for its [[queue]] entries")
	case o.dlqFloor < 0:
		return usagef("--dlq-floor %d: must be >= 0 (0: alert on the first dead letter)", o.dlqFloor)
	case !(o.spikeFactor >= 1) || o.spikeFactor > 1e6:
		return usagef("--spike-factor %g: must be a number from 1 to 1000000 (times the baseline inflow rate)", o.spikeFactor)
	case o.spikeMin < 1:
		return usagef("--spike-min %d: must be >= 1 dead letters in %s", o.spikeMin, promDuration(spikeWindow))
	case o.breakerFor < time.Minute || o.breakerFor%time.Second != 0:
		return usagef("--breaker-open-for %s: must be whole seconds, at least 1m (Prometheus evaluates rules every 15s-1m)", o.breakerFor)
	case o.keyHeldFor < time.Minute || o.keyHeldFor%time.Second != 0:
		return usagef("--key-held-for %s: must be whole seconds, at least 1m (Prometheus evaluates rules every 15s-1m)", o.keyHeldFor)
	case o.brokerFor < 2*time.Minute || o.brokerFor%time.Second != 0:
		return usagef("--broker-dlq-for %s: must be whole seconds, at least 2m (the rule's increase() needs two scrapes in the window)", o.brokerFor)
	case o.outboxAge < time.Minute || o.outboxAge%time.Second != 0:
		return usagef("--outbox-age %s: must be whole seconds, at least 1m (a relay polls every 200ms; a publish retried with backoff waits up to 30s)", o.outboxAge)
	}
	return nil
}

// alertRules builds the rule file of cfg's queues.
func alertRules(cfg config.Config, o alertOptions) ruleFile {
	var rf ruleFile
	for _, q := range cfg.Queues {
		rf.Groups = append(rf.Groups, ruleGroup{Name: "lily." + q.Name, Rules: queueRules(q, o)})
	}
	return rf
}

// queueRules are the alerting rules of one queue.
func queueRules(q lily.QueueConfig, o alertOptions) []alertRule {
	qs := q.Settings()
	owner := q.Owner
	if owner == "" {
		owner = unowned
	}
	name, cf := q.Name, o.config
	sel := fmt.Sprintf(`{%s=%q}`, lilyprom.LabelQueue, name)
	labels := func(sev string) alertLabels { return alertLabels{Severity: sev, Queue: name, Owner: owner} }
	triage := func(filter string) string {
		return fmt.Sprintf("lily dlq group --config %s --queue %s --by reason%s (then --by error_type, fingerprint; lily dlq show ID for one entry)", cf, name, filter)
	}
	decide := fmt.Sprintf("after the fix, lily dlq redrive --config %s --queue %s --dry-run, then without --dry-run (or --sample N --observe 5m first); what cannot be fixed: lily dlq discard --config %s --queue %s --reason TEXT", cf, name, cf, name)
	half := qs.DLQRetentionHours * 3600 / 2 // seconds
	halfText := promDuration(time.Duration(half) * time.Second)
	inflow := func(fn string, w, offset time.Duration) string {
		s := fmt.Sprintf("sum by (%s) (%s(%s%s[%s]", lilyprom.LabelQueue, fn, lilyprom.MetricDLQInflow, sel, promDuration(w))
		if offset > 0 {
			s += " offset " + promDuration(offset)
		}
		return s + "))"
	}
	factor := strconv.FormatFloat(o.spikeFactor, 'g', -1, 64)
	rules := []alertRule{
		{
			Alert: "LilyDLQNotEmpty",
			// Held entries less those triaged known_issue ('lily dlq triage'):
			// a known group is quiet, a new fingerprint alarms.
			Expr:   fmt.Sprintf("sum by (%s) (%s%s) > %d", lilyprom.LabelQueue, lilyprom.MetricDLQAlarming, sel, o.dlqFloor),
			Labels: labels("warning"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("{{ $value | humanize }} dead letters held in %s", name),
				Description: fmt.Sprintf("Dead letters of %s wait for a decision (pending, parked or needs_manual), more than the floor of %d "+
					"not counting groups triaged known_issue. "+
					"They are kept %dh (dlq_retention_hours), then discarded with a record. Owner: %s.", name, o.dlqFloor, qs.DLQRetentionHours, owner),
				Runbook: fmt.Sprintf("lily dlq list --config %s; %s; %s", cf, triage(""), decide),
			},
		},
		{
			Alert: "LilyDLQInflowSpike",
			Expr: fmt.Sprintf("(\n  %s\n  > %s * (\n    %s\n    or\n    %s * 0\n  )\n)\nand\n%s >= %d",
				inflow("rate", spikeWindow, 0), factor, inflow("rate", spikeBaseline, spikeWindow),
				inflow("rate", spikeWindow, 0), inflow("increase", spikeWindow, 0), o.spikeMin),
			Labels: labels("critical"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("%s is dead-lettering messages at more than %s times its usual rate", name, factor),
				Description: fmt.Sprintf("In the last %s %s dead-lettered at least %d messages, at more than %s times the rate of the %s before "+
					"(any inflow counts as a spike when there was none). Usually a bad deploy, a schema change or a failing dependency. Owner: %s.",
					promDuration(spikeWindow), name, o.spikeMin, factor, promDuration(spikeBaseline), owner),
				Runbook: fmt.Sprintf("%s: one new reason, error type or consumer version is the cause (roll it back); check lily_breaker_state{queue=%q}; %s",
					triage(" --newer-than 30m"), name, decide),
			},
		},
		{
			Alert:  "LilyDLQEntryPastHalfRetention",
			Expr:   fmt.Sprintf("max by (%s) (%s%s) > %d", lilyprom.LabelQueue, lilyprom.MetricDLQOldestAge, sel, half),
			Labels: labels("critical"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("The oldest dead letter of %s is {{ $value | humanizeDuration }} old, past half its %dh retention", name, qs.DLQRetentionHours),
				Description: fmt.Sprintf("An entry of %s has waited longer than %s, half of dlq_retention_hours = %d; at %dh 'lily dlq expire' "+
					"discards it with a record. Decide before then. Owner: %s.", name, halfText, qs.DLQRetentionHours, qs.DLQRetentionHours, owner),
				Runbook: fmt.Sprintf("lily dlq list --config %s (the past-half column); lily dlq group --config %s --queue %s --by reason --older-than %s; %s",
					cf, cf, name, halfText, decide),
			},
		},
		{
			Alert:  "LilyLedgerUnaccounted",
			Expr:   fmt.Sprintf("max by (%s) (%s%s) > 0", lilyprom.LabelQueue, lilyprom.MetricLedgerUnaccounted, sel),
			For:    promDuration(ledgerFor),
			Labels: labels("critical"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("{{ $value | humanize }} messages of %s are unaccounted for", name),
				Description: fmt.Sprintf("For %s the ledger of %s has not balanced: accepted > acked + dead_lettered + discarded + in_flight. "+
					"A message left the source without reaching a durable terminal state. Owner: %s.", promDuration(ledgerFor), name, owner),
				Runbook: fmt.Sprintf("lily reconcile --config %s (exits 1 while lost != 0); for a RabbitMQ queue drain its DLQ first: lily dlq ingest --config %s --queue %s; "+
					"then look for settlement errors ('settlement not confirmed') in the consumer logs and lily_messages_total{queue=%q,outcome=\"settle_failed\"}", cf, cf, name, name),
			},
		},
	}
	if q.BreakerEnabled() {
		rules = append(rules, alertRule{
			Alert:  "LilyBreakerOpenTooLong",
			Expr:   fmt.Sprintf("max by (%s) (%s%s) > %d", lilyprom.LabelQueue, lilyprom.MetricBreakerState, sel, lilyprom.BreakerClosedValue),
			For:    promDuration(o.breakerFor),
			Labels: labels("critical"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("The circuit breaker of %s has not closed for %s", name, promDuration(o.breakerFor)),
				Description: fmt.Sprintf("A consumer of %s stopped fetching because most deliveries failed transiently (a dependency is down); "+
					"its probes every %s keep failing. Messages wait at the source with their attempts untouched: the outage is lag, not dead letters, "+
					"until the source's own retention runs out. Owner: %s.", name, promDuration(time.Duration(qs.BreakerCooldownMillis)*time.Millisecond), owner),
				Runbook: fmt.Sprintf("find the failing dependency in the consumer logs (\"circuit breaker open\"); lily reconcile --config %s shows the waiting messages as in_flight; "+
					"the breaker closes by itself after a successful probe — do not redrive or restart in a loop", cf),
			},
		})
	}
	if q.Ordering == lily.OrderingPark || q.Ordering == lily.OrderingBlock {
		fix := fmt.Sprintf("fix the consumer, then lily dlq unpark --config %s --queue %s --key KEY (--dry-run first)", cf, name)
		if q.Ordering == lily.OrderingBlock {
			fix = fmt.Sprintf("fix the consumer, then redrive the head (lily dlq redrive --config %s --ids ID) or discard it with a reason: the key then moves on by itself", cf)
		}
		rules = append(rules, alertRule{
			Alert:  "LilyKeysHeld",
			Expr:   fmt.Sprintf("max by (%s) (%s%s) > 0", lilyprom.LabelQueue, lilyprom.MetricHeldKeys, sel),
			For:    promDuration(o.keyHeldFor),
			Labels: labels("warning"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("{{ $value | humanize }} keys of %s have been %sed for %s", name, q.Ordering, promDuration(o.keyHeldFor)),
				Description: fmt.Sprintf("With ordering = %q a dead-lettered message holds its key (on Kafka with block: its partition): the key's later "+
					"messages wait, parked in order, until the head is dealt with. Nothing is lost, but those messages are not processed. Owner: %s.",
					q.Ordering, owner),
				Runbook: fmt.Sprintf("lily dlq parked --config %s --queue %s (the head of each key); lily dlq show ID for the head's evidence; %s", cf, name, fix),
			},
		})
	}
	if brokers.IsBroker(q.Transport) {
		w := promDuration(o.brokerFor)
		rules = append(rules, alertRule{
			Alert: "LilyBrokerDLQNotIngested",
			Expr: fmt.Sprintf("max by (%s) (%s%s) > 0\nunless on (%s)\nsum by (%s) (increase(%s%s[%s])) > 0",
				lilyprom.LabelQueue, lilyprom.MetricBrokerDLQMessages, sel, lilyprom.LabelQueue, lilyprom.LabelQueue, lilyprom.MetricIngested, sel, w),
			For:    w,
			Labels: labels("critical"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("{{ $value | humanize }} dead letters of %s wait in the broker's DLQ and are not ingested", name),
				Description: fmt.Sprintf("For %s the broker (%s) has held dead letters of %s that no 'lily serve' replica drained into the catalog: "+
					"the continuous ingest stopped (no replica runs, all run with --no-ingest, or the ingest fails). Until it runs again these "+
					"dead letters are missing from lily_dlq_entries, lily_dlq_inflow_total and the alerts on them. Owner: %s.", w, q.Transport, name, owner),
				Runbook: fmt.Sprintf("check that lily serve --config %s runs (without --no-ingest) and its log for \"ingest:\" warnings; "+
					"lily_ingest_lease_held{queue=%q} shows the replica holding the queue's lease, lily_ingest_errors_total its failures; "+
					"meanwhile drain it by hand: lily dlq ingest --config %s --queue %s", cf, name, cf, name),
			},
		})
	}
	if q.Transport == lily.TransportRabbitMQ {
		rules = append(rules, inboxTwinsRule(name, sel, labels, owner))
	}
	if o.outbox {
		rules = append(rules, outboxRules(name, sel, cf, o.outboxAge, labels, owner)...)
	}
	rules = append(rules, alertRule{
		Alert:  "LilyDLQMetricsAbsent",
		Expr:   fmt.Sprintf("absent(%s%s)", lilyprom.MetricDLQEntries, sel),
		For:    promDuration(absentFor),
		Labels: labels("warning"),
		Annotations: alertAnnotation{
			Summary: fmt.Sprintf("No dead-letter metrics for %s: its DLQ alerts are blind", name),
			Description: fmt.Sprintf("Prometheus has had no %s series of %s for %s: no process exports lilyprom's catalog collector for this queue, "+
				"it is not scraped, or it cannot read the catalog (%s 0). Owner: %s.", lilyprom.MetricDLQEntries, name, promDuration(absentFor), lilyprom.MetricCatalogUp, owner),
			Runbook: fmt.Sprintf("check the scrape target that serves lilyprom's CatalogCollector and its %s; meanwhile lily dlq list --config %s", lilyprom.MetricCatalogUp, cf),
		},
	})
	return rules
}

// promDuration formats d as a Prometheus duration: "10m", "1h30m", "90s".
func promDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.name)
			d -= n * u.d
		}
	}
	return b.String()
}

// writeRulesYAML writes rf as a Prometheus rule file. Strings are YAML
// double-quoted scalars (Go's quoting is a subset of YAML's escapes);
// expressions are literal blocks.
func writeRulesYAML(w io.Writer, rf ruleFile, config string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Prometheus alerting rules for the queues of %s, written by 'lily alerts'.\n", oneLine(config))
	b.WriteString("# Metrics: package lilyprom. Regenerate when the configuration changes; check with 'promtool check rules'.\n")
	b.WriteString("groups:\n")
	q := strconv.Quote
	for _, g := range rf.Groups {
		fmt.Fprintf(&b, "  - name: %s\n    rules:\n", q(g.Name))
		for _, r := range g.Rules {
			fmt.Fprintf(&b, "      - alert: %s\n", q(r.Alert))
			b.WriteString("        expr: |-\n")
			for _, line := range strings.Split(r.Expr, "\n") {
				fmt.Fprintf(&b, "          %s\n", strings.TrimRight(line, " \t"))
			}
			if r.For != "" {
				fmt.Fprintf(&b, "        for: %s\n", q(r.For))
			}
			fmt.Fprintf(&b, "        labels:\n          severity: %s\n          queue: %s\n          owner: %s\n",
				q(r.Labels.Severity), q(r.Labels.Queue), q(r.Labels.Owner))
			fmt.Fprintf(&b, "        annotations:\n          summary: %s\n          description: %s\n          runbook: %s\n",
				q(r.Annotations.Summary), q(r.Annotations.Description), q(r.Annotations.Runbook))
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// oneLine keeps a value on one line of a YAML comment.
func oneLine(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}
