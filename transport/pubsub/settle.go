package pubsub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lily-mq/lily/transport"
)

// Settle applies settlements in the safe order: for Retry and DeadLetter
// the copy is published and confirmed (the service returned its message
// ID) before the original is acknowledged; if the publish fails the
// original is left unacknowledged (it comes back after its ack deadline).
//
//   - Ack: Acknowledge.
//   - Retry: a copy with the settlement's headers and x-lily-due-at to the
//     delay topic <subscription>.retry.<ms>ms, then Acknowledge.
//   - DeadLetter: a copy with the evidence (packed to fit the service's
//     limits, see EncodeAttributes) to <subscription>.dlt, then Acknowledge.
//   - Release: ModifyAckDeadline to the settlement's delay (0 = nack, at
//     once); it costs a delivery attempt when the message comes back.
//
// Under p.FailRefused a dead-letter copy the service cannot take fails at
// once with transport.ErrDeadLetterRefused, the original unacknowledged,
// so that ledger.Accounted stores the dead letter in the catalog and then
// acknowledges it (see refused.go).
func (t *Transport) Settle(ctx context.Context, p *transport.SettleParams) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	n := len(p.Settlements)
	errs := make([]error, n)
	var acks []int
	copies := map[string][]int{} // target topic → settlements
	msgs := make([]*pubsubpb.PubsubMessage, n)
	now := time.Now()
	for i, s := range p.Settlements {
		d := s.Delivery
		r, err := receiptOf(d)
		if err != nil {
			errs[i] = err
			continue
		}
		sub := r.main
		switch s.Action {
		case transport.Ack:
			acks = append(acks, i)
		case transport.Retry:
			ms := max(s.Delay.Milliseconds(), 1)
			due := strconv.FormatInt(now.Add(s.Delay).UnixMilli(), 10)
			pm, err := toPubsub(d.Message, s.Headers, map[string]string{AttrDueAt: due})
			if err != nil {
				errs[i] = fmt.Errorf("pubsub: retry copy of event %s: %w", d.EventID, err)
				continue
			}
			msgs[i] = pm
			target := DelayTopic(sub, ms)
			copies[target] = append(copies[target], i)
		case transport.DeadLetter:
			pm, err := fitEvidence(d, s.Headers)
			if err != nil {
				errs[i] = fmt.Errorf("pubsub: %w", err)
				if p.FailRefused && errors.Is(err, ErrLimit) {
					errs[i] = refused(s, DeadLetterTopic(sub), err)
				}
				continue
			}
			msgs[i] = pm
			target := DeadLetterTopic(sub)
			copies[target] = append(copies[target], i)
		case transport.Release:
			secs := int32(min((s.Delay+time.Second-1)/time.Second, 600))
			if err := t.modify(ctx, []*transport.Delivery{d}, secs)[0]; err != nil {
				errs[i] = err
			} else {
				t.release(d)
			}
		default:
			errs[i] = fmt.Errorf("pubsub: unknown settlement action %d", s.Action)
		}
	}
	for target, idx := range copies {
		batch := make([]*pubsubpb.PubsubMessage, len(idx))
		for k, i := range idx {
			batch[k] = msgs[i]
		}
		if _, err := t.publish(ctx, target, batch); err != nil {
			if p.FailRefused && p.Settlements[idx[0]].Action == transport.DeadLetter && status.Code(err) == codes.InvalidArgument {
				// Which copies the service refuses: each alone.
				acks = append(acks, t.publishEach(ctx, target, p.Settlements, idx, msgs, errs)...)
				continue
			}
			for _, i := range idx {
				errs[i] = fmt.Errorf("pubsub: %s copy of event %s not confirmed, original left unacknowledged: %w",
					p.Settlements[i].Action, p.Settlements[i].Delivery.EventID, err)
			}
			continue
		}
		acks = append(acks, idx...)
	}
	ds := make([]*transport.Delivery, len(acks))
	for k, i := range acks {
		ds[k] = p.Settlements[i].Delivery
	}
	for k, err := range t.acknowledge(ctx, ds) {
		if err != nil {
			errs[acks[k]] = err
		} else {
			t.release(ds[k])
		}
	}
	return settleErr(errs)
}
