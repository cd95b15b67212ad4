package kafka

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// A share client acquires records only while a poll runs, but a poll that
// ends (its wait over) usually leaves one fetch on its way: its answer
// waits in the client for the next poll. When the client closes instead (a
// change of fetch width, a stop), franz-go releases that answer's records.
// The broker counted their delivery when it handed them out, so each comes
// back with its count raised although no handler saw it — and one that was
// on its last delivery (the group's delivery count limit) is archived: never
// delivered again, no copy anywhere (seed 000's silent loss).
//
// So every share client carries an acquired tracker (a fetch hook), and a
// closed client's records that no poll returned are looked at: those the
// broker archived are dead-lettered from the fetched copy, with evidence
// that says what happened; the others come back and are only logged.

// acquired is the set of records a share client fetched that no poll has
// returned yet (a kgo fetch hook).
type acquired struct {
	mu   sync.Mutex
	recs map[*kgo.Record]struct{}
}

var (
	_ kgo.HookFetchRecordBuffered   = (*acquired)(nil)
	_ kgo.HookFetchRecordUnbuffered = (*acquired)(nil)
)

func newAcquired() *acquired { return &acquired{recs: map[*kgo.Record]struct{}{}} }

// OnFetchRecordBuffered records a fetched record.
func (a *acquired) OnFetchRecordBuffered(r *kgo.Record) {
	a.mu.Lock()
	a.recs[r] = struct{}{}
	a.mu.Unlock()
}

// OnFetchRecordUnbuffered forgets a record a poll returned. One the client
// dropped without a poll stays: no handler saw it.
func (a *acquired) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if !polled {
		return
	}
	a.mu.Lock()
	delete(a.recs, r)
	a.mu.Unlock()
}

// unseen returns the records no poll returned, in topic, partition and
// offset order.
func (a *acquired) unseen() []*kgo.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*kgo.Record, 0, len(a.recs))
	for r := range a.recs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y *kgo.Record) int {
		return cmp.Or(cmp.Compare(x.Topic, y.Topic), cmp.Compare(x.Partition, y.Partition), cmp.Compare(x.Offset, y.Offset))
	})
	return out
}

// retire closes a client the member no longer uses and looks after the
// records its close released unseen.
func (s *shareInstance) retire(cl *kgo.Client, acq *acquired) {
	defer s.retiring.Done()
	cl.Close()
	s.rescue(acq.unseen())
}

// archiveLimit is the share group's delivery count limit, or 0 when it
// was not read.
func (s *shareInstance) archiveLimit() int {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.t.shareLimits[s.group]
}

// rescue handles records a closed client released without a poll having
// returned them: one on the group's last delivery was archived by the
// broker, so Lily dead-letters its fetched copy (reason delivery_limit);
// the others come back with their count raised.
func (s *shareInstance) rescue(rs []*kgo.Record) {
	limit := s.archiveLimit()
	var dead []*kgo.Record
	for _, r := range rs {
		if limit > 0 && int(r.DeliveryCount()) >= limit {
			dead = append(dead, r)
			continue
		}
		s.t.opts.Logger.Info("kafka: a share fetch answered after its poll ended and its client closed; the record comes back to the group with its count raised",
			"group", s.group, "record", recordID(r), "delivery_count", r.DeliveryCount())
	}
	if len(dead) == 0 {
		return
	}
	why := fmt.Sprintf("share group %s archived the record at its delivery count limit %d: the last delivery was acquired by a fetch that answered after its poll ended, and released unseen when the member's client closed", s.group, limit)
	for _, r := range s.deadLetter(dead, why) {
		s.t.opts.Logger.Warn("kafka: the share group archived a record on its last delivery, which a fetch answered after its poll had acquired and its client's close released unseen; Lily dead-lettered the fetched copy (reason delivery_limit)",
			"group", s.group, "record", recordID(r), "delivery_count", r.DeliveryCount())
	}
}

// deadLetterLast dead-letters records on the group's last delivery that
// the member holds and never handed out, when it stops: released, the
// broker would archive them. Each is ACCEPTed once its copy is confirmed.
func (s *shareInstance) deadLetterLast(cl *kgo.Client, rs []*kgo.Record) {
	why := fmt.Sprintf("the member of share group %s stopped holding the record on its last delivery (the group's delivery count limit %d), never handed out: released, the broker would have archived it", s.group, s.archiveLimit())
	done := s.deadLetter(rs, why)
	if len(done) == 0 {
		return
	}
	cl.MarkAcks(kgo.AckAccept, done...)
	ctx, cancel := context.WithTimeout(context.Background(), s.t.opts.ProduceTimeout)
	defer cancel()
	if err := cl.FlushAcks(ctx); err != nil {
		s.t.opts.Logger.Warn("kafka: accepting dead-lettered share records did not finish; the broker archives them when the member leaves (their copies are in the dead-letter topic)", "group", s.group, "err", err)
	}
}

// deadLetter produces a dead-letter copy (reason delivery_limit, error
// message why) of each of rs and returns those confirmed; the others are
// reported lost.
func (s *shareInstance) deadLetter(rs []*kgo.Record, why string) []*kgo.Record {
	ctx, cancel := context.WithTimeout(context.Background(), s.t.opts.ProduceTimeout)
	defer cancel()
	copies := make([]*kgo.Record, 0, len(rs))
	var keep, done []*kgo.Record
	for _, r := range rs {
		c, err := s.archivedCopy(ctx, r, why)
		if err != nil {
			s.lost(r, err)
			continue
		}
		copies, keep = append(copies, c), append(keep, r)
	}
	for i, err := range s.t.produce(ctx, copies) {
		if err != nil {
			s.lost(keep[i], err)
			continue
		}
		done = append(done, keep[i])
	}
	return done
}

// lost reports a record on the group's last delivery that Lily could not
// dead-letter: the broker archives it, its bytes stay in the log at its
// offset.
func (s *shareInstance) lost(r *kgo.Record, err error) {
	s.t.opts.Logger.Error("kafka: a share record on the group's last delivery is archived and Lily could not dead-letter its copy: read it from the log at its offset and dead-letter it by hand; the ledger counts it as lost",
		"group", s.group, "record", recordID(r), "delivery_count", r.DeliveryCount(), "err", err)
}

// archivedCopy is the dead-letter copy of a record on the share group's
// last delivery: the record as fetched plus evidence (error message why).
func (s *shareInstance) archivedCopy(ctx context.Context, r *kgo.Record, why string) (*kgo.Record, error) {
	msg, _ := recordMessage(r)
	h := transport.CloneHeaders(msg.Headers)
	if h == nil {
		h = transport.Headers{}
	}
	now := time.Now().UTC()
	rec := evidence.Record{
		Reason:          evidence.ReasonDeliveryLimit,
		ErrorType:       "share-group-archive",
		ErrorMessage:    why,
		Source:          "kafka/" + s.key.queue,
		SourcePartition: r.Partition, HasPartition: true,
		SourceOffset: r.Offset, HasOffset: true,
		SourceMessageID: recordID(r),
		DeliveryCount:   int(r.DeliveryCount()),
		LastFailureAt:   now,
		DeadLetteredAt:  now,
		Consumer:        s.key.name,
	}
	rec.Apply(h)
	// The archived delivery is the history's last attempt: crash-type, the
	// handler never settled it.
	evidence.AddAttempt(h, rec.Attempt(evidence.OutcomeDeadLetter))
	st := transport.Settlement{
		Delivery: &transport.Delivery{Message: msg, Queue: s.key.queue, DeliveryCount: int(r.DeliveryCount())},
		Action:   transport.DeadLetter, Headers: h, Reason: string(evidence.ReasonDeliveryLimit),
	}
	return s.t.handOff(ctx, st, s.key.queue, r.Partition, r.Offset)
}
