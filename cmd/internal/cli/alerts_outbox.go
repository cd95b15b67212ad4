package cli

import (
	"fmt"
	"time"

	"github.com/lily-mq/lily/lilyprom"
)

// outboxRules are the rules on a queue's outbox metrics ('lily relay
// --metrics'): a backlog that stops moving, and metrics that stop coming.
func outboxRules(name, sel, cf string, age time.Duration, labels func(string) alertLabels, owner string) []alertRule {
	return []alertRule{
		{
			Alert:  "LilyOutboxStalled",
			Expr:   fmt.Sprintf("max by (%s) (%s%s) > %d", lilyprom.LabelQueue, lilyprom.MetricOutboxOldestAge, sel, int64(age/time.Second)),
			Labels: labels("critical"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("An outbox row for %s has waited {{ $value | humanizeDuration }} unpublished", name),
				Description: fmt.Sprintf("The oldest row the application committed to its outbox for %s is older than %s: no relay runs, or every "+
					"publish to %s fails (lily_outbox_failing, lily_outbox_publish_failures_total). Nothing is lost — the rows stay in the "+
					"application's database — but the messages are not sent, and the rows of their keys wait behind them. Owner: %s.",
					name, promDuration(age), name, owner),
				Runbook: fmt.Sprintf("check that lily relay --config %s runs, and its log for \"outbox relay: publish failed\"; "+
					"the outbox row's last_error says why; once the transport answers, the relay publishes the rows in order by itself; "+
					"lily relay --config %s --once --json relays what is due by hand", cf, cf),
			},
		},
		{
			Alert:  "LilyOutboxMetricsAbsent",
			Expr:   fmt.Sprintf("absent(%s%s)", lilyprom.MetricOutboxPending, sel),
			For:    promDuration(absentFor),
			Labels: labels("warning"),
			Annotations: alertAnnotation{
				Summary: fmt.Sprintf("No outbox metrics for %s: LilyOutboxStalled is blind", name),
				Description: fmt.Sprintf("Prometheus has had no %s series of %s for %s: no 'lily relay --metrics' is scraped, or it cannot read "+
					"the outbox (%s 0). Owner: %s.", lilyprom.MetricOutboxPending, name, promDuration(absentFor), lilyprom.MetricOutboxUp, owner),
				Runbook: fmt.Sprintf("run lily relay --config %s --metrics ADDR and scrape ADDR/metrics; meanwhile lily relay --config %s --once --json relays what is due and prints how many rows stay pending", cf, cf),
			},
		},
	}
}
