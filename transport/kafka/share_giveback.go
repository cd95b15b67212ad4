package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// giveBack keeps the first of a poll's redeliveries (sorted, lowest count
// first) and gives the others back, so that while the one runs alone this
// member holds nothing else a crash would take down with it.
//
// A crashed member's records come back to the group at once, and a member
// fetching wide can take several of them in one poll. Held while one of
// them runs — the poison, perhaps — they would die with it, their counts
// raised at every crash until they reach delivery_limit beside it (docs/design.md
// §4's crash collateral, between competing members). A share group has no
// uncounted way back (RELEASE counts a delivery, as a crash does), and a
// copy on the main topic would reach every other consumer group of the
// topic. So the copy goes to the queue's give-back topic (GiveBackTopic,
// a retry topic of no delay: Lily's own), carrying the count so far (evidence.HeaderPriorDeliveries:
// the deliveries less this one, which no handler saw); the queue's consumer
// group hands it out with that count going on (a redelivery, so alone
// where the runtime is cautious), and only once the copy is confirmed is
// the original ACCEPTed.
func (s *shareInstance) giveBack(cl *kgo.Client, es []*shareEntry) []*shareEntry {
	if len(es) < 2 {
		return es
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.t.opts.ProduceTimeout)
	defer cancel()
	now := time.Now()
	keep := es[:1:1]
	var copies []*kgo.Record
	var from []*shareEntry
	for _, e := range es[1:] {
		h := transport.CloneHeaders(e.msg.Headers)
		if h == nil {
			h = transport.Headers{}
		}
		h[evidence.HeaderPriorDeliveries] = evidence.CarriedDeliveries(int(e.rec.DeliveryCount()))
		st := transport.Settlement{Delivery: &transport.Delivery{Message: e.msg}, Action: transport.Retry, Headers: h} // Delay 0: GiveBackTopic
		r, err := s.t.handOffDue(ctx, st, s.key.queue, e.rec.Partition, e.rec.Offset, now)
		if err != nil {
			s.t.opts.Logger.Warn("kafka: a share redelivery could not be given back; the member holds it", "group", s.group, "record", recordID(e.rec), "err", err)
			keep = append(keep, e)
			continue
		}
		copies, from = append(copies, r), append(from, e)
	}
	var accept []*kgo.Record
	for i, err := range s.t.produce(ctx, copies) {
		if err != nil {
			s.t.opts.Logger.Warn("kafka: a share redelivery's give-back copy was not confirmed; the member holds the original", "group", s.group, "record", recordID(from[i].rec), "err", err)
			keep = append(keep, from[i])
			continue
		}
		accept = append(accept, from[i].rec)
	}
	if len(accept) == 0 {
		return keep
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	mark := s.ackMark()
	cl.MarkAcks(kgo.AckAccept, accept...)
	if err := cl.FlushAcks(ctx); err != nil {
		s.t.opts.Logger.Warn("kafka: accepting given-back share records did not finish; the acknowledgements go with the next request", "group", s.group, "err", err)
	}
	for _, r := range accept {
		if err := s.refusedSince(mark, r.Topic, r.Partition); err != nil {
			// The lock ran out: the broker hands the original out again
			// beside its copy. A duplicate, not a loss; logged.
			s.t.opts.Logger.Warn("kafka: the share group refused to accept a given-back record; it comes back beside its copy", "group", s.group, "record", recordID(r), "err", err)
		}
	}
	s.t.opts.Logger.Debug("kafka: share member gave back redeliveries it would have held beside one running alone",
		"group", s.group, "given_back", len(accept), "kept", len(keep))
	return keep
}
