package cli

import (
	"fmt"
	"time"

	"github.com/lily-mq/lily/lilyprom"
)

// twinsWindow is how long LilyInboxTwins keeps firing after a twin.
const twinsWindow = time.Hour

// inboxTwinsRule fires when an inbox on a RabbitMQ queue met a twin: a
// message without a message_id that is byte-identical to one it already
// applied (same body, headers and properties), so that both share one
// content-derived event ID and, by default (inbox.ContentIDsOnce), the
// second gets no effect. Only RabbitMQ gives such IDs: Kafka has log
// coordinates, SQS and Pub/Sub a message ID of their own. The counter
// exists only where an application wraps its handler in an inbox with
// lilyprom's hooks, so elsewhere the rule never fires.
func inboxTwinsRule(name, sel string, labels func(string) alertLabels, owner string) alertRule {
	w := promDuration(twinsWindow)
	return alertRule{
		Alert:  "LilyInboxTwins",
		Expr:   fmt.Sprintf("sum by (%s) (increase(%s%s[%s])) > 0", lilyprom.LabelQueue, lilyprom.MetricInboxTwins, sel, w),
		Labels: labels("warning"),
		Annotations: alertAnnotation{
			Summary: fmt.Sprintf("The inbox of %s acked {{ $value | humanize }} twin messages without their effect in the last %s", name, w),
			Description: fmt.Sprintf("A producer published to %s, without a message_id, messages byte-identical to ones the inbox had already "+
				"applied (same body, headers and properties). They share one content-derived event ID, so the inbox cannot tell a second "+
				"message from a redelivery of the first and, with inbox.ContentIDsOnce (the default), acked it without its effect. If the "+
				"producer meant two events, an effect is missing. Owner: %s.", name, owner),
			Runbook: "find the producer (the consumer's log warns \"inbox: a message without an ID is byte-identical to one already applied\" with the event ID) and make it set message_id: " +
				"that is the only fix, no broker property tells such messages apart; meanwhile inbox.ContentIDsRefuse dead-letters them " +
				"(reason permanent, inbox.ErrContentID) for a decision instead of acking them; docs/inbox.md explains both",
		},
	}
}
