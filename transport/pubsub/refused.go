package pubsub

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lily-mq/lily/transport"
)

// A dead-letter copy the service cannot take (docs/design.md §8.3, §9.6).
// The service refuses a message over its limits (MaxMessageBytes with its
// attributes, MaxAttributes, …); Lily checks them before publishing
// (pstest enforces none) and first trims its own evidence to fit
// (fitEvidence). A copy that still does not fit — the producer's own
// attributes take the room, or the body nearly fills 10 MB — would leave
// the original unacknowledged: redelivered, its handler run again, until
// the subscription's dead-letter policy forwards it as delivery_limit,
// the real reason and error lost. Under SettleParams.FailRefused such a
// copy fails at once with transport.ErrDeadLetterRefused instead, and
// ledger.Accounted stores the dead letter in the catalog; so does one the
// service itself refuses with INVALID_ARGUMENT (a limit Lily's check
// missed), found by publishing the batch's copies one by one.

// refused is the error of a dead-letter copy to topic the service cannot
// take: it says why and wraps transport.ErrDeadLetterRefused and cause.
func refused(s transport.Settlement, topic string, cause error) error {
	why := "the dead-letter copy with its evidence is over Pub/Sub's message limits even with Lily's evidence trimmed, so " + topic + " cannot take it"
	if !errors.Is(cause, ErrLimit) {
		why = "Pub/Sub refused the dead-letter copy to " + topic + " as invalid"
	}
	return fmt.Errorf("pubsub: dead-letter copy of event %s: %w: %s: %w", s.Delivery.EventID, transport.ErrDeadLetterRefused, why, cause)
}

// publishEach publishes the dead-letter copies idx (msgs[i]) to topic one
// by one, after the service refused their batch as invalid: a copy it
// refuses alone fails with transport.ErrDeadLetterRefused, any other
// failure as usual. It returns the settlements whose copy was confirmed.
func (t *Transport) publishEach(ctx context.Context, topic string, ss []transport.Settlement, idx []int, msgs []*pubsubpb.PubsubMessage, errs []error) (ok []int) {
	for _, i := range idx {
		_, err := t.publish(ctx, topic, []*pubsubpb.PubsubMessage{msgs[i]})
		switch {
		case err == nil:
			ok = append(ok, i)
		case status.Code(err) == codes.InvalidArgument:
			errs[i] = refused(ss[i], topic, err)
		default:
			errs[i] = fmt.Errorf("pubsub: %s copy of event %s not confirmed, original left unacknowledged: %w",
				ss[i].Action, ss[i].Delivery.EventID, err)
		}
	}
	return ok
}
