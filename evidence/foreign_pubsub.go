package evidence

import (
	"strconv"
	"time"
)

// SystemPubSub: Google Pub/Sub's dead-letter policy — the
// CloudPubSubDeadLetterSource* attributes the service adds to a message it
// forwards after max_delivery_attempts, or x-lily-pubsub-forwarded-by,
// which Lily's Pub/Sub transport sets on a message that reached Lily's
// dead-letter topic without Lily evidence (only the dead-letter policy
// writes there besides Lily; the pstest fake forwards without the
// attributes).
const SystemPubSub = "pubsub"

// HeaderPubSubForwardedBy is set by the Pub/Sub transport's drain on a dead
// letter without Lily evidence, with the value "dead_letter_policy".
const HeaderPubSubForwardedBy = "x-lily-pubsub-forwarded-by"

// decodePubSub reads the dead-letter policy's attributes.
func decodePubSub(v *view) (ForeignEvidence, bool) {
	raw := v.raw("CloudPubSubDeadLetterSource", HeaderPubSubForwardedBy)
	if raw == nil {
		return ForeignEvidence{}, false
	}
	e := ForeignEvidence{
		System: SystemPubSub,
		Origin: "CloudPubSubDeadLetterSource*",
		Reason: "max_delivery_attempts",
		Source: v.text("CloudPubSubDeadLetterSourceSubscription"),
		Raw:    raw,
	}
	if e.Source == "" {
		e.Origin = HeaderPubSubForwardedBy
	}
	if n, err := strconv.Atoi(v.text("CloudPubSubDeadLetterSourceDeliveryCount")); err == nil {
		e.Count = n
	}
	if ts, err := time.Parse(time.RFC3339Nano, v.text("CloudPubSubDeadLetterSourceTopicPublishTime")); err == nil {
		e.Time = ts.UTC()
	}
	return e, true
}

// pubsubReason reports a dead letter forwarded by Pub/Sub's dead-letter
// policy: reason delivery_limit.
func pubsubReason(v *view) (Reason, bool) {
	if v.text("CloudPubSubDeadLetterSourceDeliveryCount") != "" || v.text("CloudPubSubDeadLetterSourceSubscription") != "" ||
		v.text(HeaderPubSubForwardedBy) != "" {
		return ReasonDeliveryLimit, true
	}
	return "", false
}
