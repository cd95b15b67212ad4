package rabbitmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/transport"
)

var _ transport.ConsumeCanceller = (*Transport)(nil)

type consumerKey struct{ queue, instance string }

// consumer is one consumer instance on one queue: its own channel, its
// basic.consume, the deliveries it holds unsettled, and its mode. In
// cautious mode it consumes with prefetch 1, so that when a redelivered
// message kills the process, nothing else is in flight with it.
type consumer struct {
	t   *Transport
	key consumerKey

	mu       sync.Mutex
	ch       *amqp.Channel
	tag      string
	in       <-chan amqp.Delivery // nil when not consuming
	pending  []amqp.Delivery      // received, not yet handed out
	reds     []amqp.Delivery      // redelivered, held back until the window's first-time deliveries are out
	cautious bool
	isolate  bool
	held     map[uint64]bool // delivery tags handed out, not settled
	dead     bool
	canceled bool            // CancelConsume: never subscribe again, hand out what was pushed
	alone    uint64          // tag of a redelivery handed out alone, until settled
	keyOrder bool            // per-key order (a single-active-consumer queue): prefetch 1, never cancelled while it holds anything
	maxTag   uint64          // the highest delivery tag read on ch
	holes    map[uint64]bool // tags below maxTag not read (yet): see saw
	settled  settleClock     // recent acknowledgements: see quiet.go
}

var tagSeq atomic.Uint64

// receipt settles a delivery on the channel it came from.
type receipt struct {
	c   *consumer
	ch  *amqp.Channel
	tag uint64
	raw *amqp.Delivery
}

func (t *Transport) consumer(queue, instance string, isolate bool) *consumer {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := consumerKey{queue, instance}
	c, ok := t.consumers[k]
	if !ok {
		c = &consumer{t: t, key: k, isolate: isolate, cautious: isolate, held: map[uint64]bool{}}
		t.consumers[k] = c
	}
	return c
}

// invalidate marks the consumer's channel as gone (connection lost or
// closed): its unsettled deliveries go back to the queue.
func (c *consumer) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
	if c.ch != nil {
		c.ch.Close()
	}
}

// open (re)opens the consumer's channel; held receipts of an old channel
// are void (the broker requeued them).
func (c *consumer) open(ctx context.Context) error {
	if c.ch != nil && !c.ch.IsClosed() && !c.dead {
		return nil
	}
	ch, _, err := c.t.channel(ctx)
	if err != nil {
		return err
	}
	go c.watch(ch.NotifyClose(make(chan *amqp.Error, 1)))
	c.ch, c.in, c.pending, c.reds, c.held, c.dead = ch, nil, nil, nil, map[uint64]bool{}, false
	c.maxTag, c.holes = 0, nil
	c.cautious = c.isolate
	return nil
}

// watch logs a channel exception on a consumer's channel: the broker
// closed it, and every delivery it held unacknowledged goes back to the
// queue with its count raised — those being handled now will be handled
// again (their settlements report transport.ErrLeaseLost).
func (c *consumer) watch(closed <-chan *amqp.Error) {
	if err, ok := <-closed; ok && err != nil {
		c.mu.Lock()
		held := len(c.held)
		c.mu.Unlock()
		c.t.opts.Logger.Warn("rabbitmq: the broker closed a consumer's channel; its unacknowledged deliveries return to the queue with their counts raised",
			"queue", c.key.queue, "instance", c.key.instance, "held", held, "code", err.Code, "reason", err.Reason)
	}
}

// start begins consuming with the mode's prefetch (always 1 for per-key
// order: see Receive).
func (c *consumer) start(prefetch int) error {
	if c.cautious || c.keyOrder {
		prefetch = 1
	}
	if err := c.ch.Qos(max(prefetch, 1), 0, false); err != nil {
		return fmt.Errorf("rabbitmq: qos on %s: %w", c.key.queue, err)
	}
	c.tag = "lily-" + c.key.instance + "-" + strconv.FormatUint(tagSeq.Add(1), 10)
	in, err := c.ch.Consume(c.key.queue, c.tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: consume %s: %w", c.key.queue, err)
	}
	c.in = in
	return nil
}

// stop cancels the consume and keeps what was already pushed, to hand it
// out before anything new.
//
// The client library drops a delivery that reaches it after the cancel's
// reply (its consumer tag is gone), and a quorum queue does send some: the
// ones due to credit that acknowledgements sent just before had freed. A
// dropped delivery stays unacknowledged on the channel, invisible, until
// the channel closes and the broker returns it with its count raised — the
// exposure the cautious window and the graceful stop exist to avoid. So
// the cancel is preceded by a basic.get: the queue answers it only after
// the deliveries it pushed before, which therefore arrive while the
// consumer is still registered. The message the get takes, if any, is
// kept like a pushed one. (A message published between the get and the
// cancel can still race; the window for that is one round trip.) A queue
// that keeps per-key order has a single active consumer, which a get would
// bypass: there the cancel goes alone.
func (c *consumer) stop() {
	if c.in == nil {
		return
	}
	var got *amqp.Delivery
	if !c.keyOrder {
		if d, ok, err := c.ch.Get(c.key.queue, false); err == nil && ok {
			got = &d
		}
	}
	if got != nil {
		c.saw(got.DeliveryTag)
	}
	if err := c.ch.Cancel(c.tag, false); err == nil {
		for d := range c.in {
			c.saw(d.DeliveryTag)
			c.pending = append(c.pending, d)
		}
	}
	if got != nil {
		c.pending = append(c.pending, *got)
	}
	c.in = nil
}

// saw notes that the delivery with tag was read from the channel. A
// channel numbers its deliveries 1, 2, 3, …, so a tag above the next one
// expected leaves holes: deliveries not read yet (the basic.get of stop
// is read before the pushed deliveries in front of it) or never to be
// read — the client library drops a delivery that arrives for a consumer
// tag it has already cancelled, and the broker still counts it as
// delivered to this channel, unacknowledged and invisible until the
// channel closes. See releaseHoles.
func (c *consumer) saw(tag uint64) {
	if tag <= c.maxTag {
		delete(c.holes, tag)
		return
	}
	for t := c.maxTag + 1; t < tag; t++ {
		if c.holes == nil {
			c.holes = map[uint64]bool{}
		}
		c.holes[t] = true
	}
	c.maxTag = tag
}

// releaseHoles gives back to the queue every delivery of the channel that
// was never read, once none can still be: called when a delivery of the
// current subscription is read, since the broker numbered everything sent
// before it lower and the earlier subscriptions' deliveries were drained
// (stop) or dropped by the client. Left alone, such a delivery would stay
// unacknowledged, held by no handler, for as long as the channel lives.
// The release (nack with requeue) raises its delivery count, as a channel
// close would. A delivery dropped at the end of a burst, with nothing
// behind it, is found only by the next delivery on the channel or given
// back when the channel closes (the consumer stops): held late, never
// lost. c.mu is held.
func (c *consumer) releaseHoles() {
	for tag := range c.holes {
		delete(c.holes, tag)
		c.settled.note(1)
		if err := c.ch.Nack(tag, false, true); err != nil {
			c.t.opts.Logger.Warn("rabbitmq: releasing a delivery the client library dropped failed", "queue", c.key.queue, "tag", tag, "err", err)
			continue
		}
		c.t.opts.Logger.Warn("rabbitmq: released a delivery the client library dropped after a cancel (it had reached the channel after the cancel's reply); it returns to the queue with its count raised",
			"queue", c.key.queue, "tag", tag)
	}
}

// redelivered reports whether the broker handed d out before (see
// deliveryCount: a first delivery's x-delivery-count is not the broker's).
func redelivered(d *amqp.Delivery) bool { return deliveryCount(d) > 1 }

// Receive hands out deliveries pushed by the broker (prefetch window
// p.Prefetch, or p.Max when unset). It refuses a queue that is not a
// quorum queue with transport.ErrUnsafeQueue (see checkQueueType). With p.IsolateRedeliveries a
// redelivered message is handed out alone and switches the consumer to
// prefetch 1 until a first-time delivery arrives again.
//
// The cautious window: when a redelivery arrives mid-stream, the consume is
// cancelled and the first-time deliveries the broker had already pushed
// are handed out — to be processed and settled — before the redelivered
// one, so that when it runs alone (the runtime waits for everything else
// to settle first) it is the only delivery on the channel: if it kills the
// process, nothing else comes back with a raised count. A queue that keeps
// per-key order (p.KeyOrder) cannot let later messages pass it: there the
// redelivery is handed out next, with the pushed window still on the
// channel.
//
// A queue that keeps per-key order has a single active consumer (the
// others, in other processes, stand by), and a basic.cancel of the active
// one makes the broker activate the next at once, while the cancelled one
// still holds what it was pushed: the two processes would then handle
// messages of one key side by side, out of order (a redelivery, or the
// first delivery after a start, used to switch the prefetch that way). So
// a key-order consumer subscribes once, with prefetch 1 — the cautious
// window, whatever comes: a standby that takes over from a process that
// died takes the redeliveries one at a time — and is never cancelled while
// it holds anything: its graceful stop closes the channel after every
// handler has settled (see CancelConsume, StopConsumer). The cost is
// throughput: one message in flight per ordered queue.
//
// After CancelConsume, Receive hands out what had been pushed, without
// waiting and without subscribing again, and then nothing.
func (t *Transport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	if err := t.checkQueueType(ctx, p.Queue); err != nil {
		return nil, err
	}
	c := t.consumer(p.Queue, p.Consumer, p.IsolateRedeliveries)
	c.mu.Lock()
	c.keyOrder = p.KeyOrder
	if err := c.open(ctx); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	limit := max(p.Max, 1)
	var out []amqp.Delivery
	// take adds d to the batch; it reports false when the batch must end.
	take := func(d amqp.Delivery) bool {
		if !c.isolate {
			out = append(out, d)
			return len(out) < limit
		}
		if redelivered(&d) {
			if !c.cautious {
				c.cautious = true
				if !p.KeyOrder { // per-key order keeps its one subscription
					c.stop() // what the broker pushed after it waits in pending
				}
			}
			if p.KeyOrder {
				if len(out) > 0 {
					c.pending = append([]amqp.Delivery{d}, c.pending...)
				} else {
					out = append(out, d)
				}
				return false
			}
			c.reds = append(c.reds, d)
			return len(out) < limit
		}
		if c.cautious && len(c.reds) == 0 {
			c.cautious = false
			if !p.KeyOrder { // per-key order keeps its one subscription
				c.stop() // next consume uses the full prefetch
			}
		}
		out = append(out, d)
		return len(out) < limit
	}
	fill := func() {
		for len(c.pending) > 0 && len(out) < limit {
			d := c.pending[0]
			c.pending = c.pending[1:]
			if !take(d) {
				return
			}
		}
	}
	fill()
	if len(out) == 0 && len(c.reds) == 0 && !c.canceled {
		if c.in == nil {
			prefetch := p.Prefetch
			if prefetch <= 0 {
				prefetch = limit
			}
			if err := c.start(prefetch); err != nil {
				c.ch.Close()
				c.mu.Unlock()
				return nil, err
			}
		}
		in, ch := c.in, c.ch
		// Wait for the first delivery without holding the lock: the
		// settler must be able to ack meanwhile.
		c.mu.Unlock()
		d, ok, err := waitDelivery(ctx, in, p.Wait)
		c.mu.Lock()
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		switch {
		case ok && d == nil:
			// nothing within Wait
		case c.ch != ch:
			// the channel was replaced meanwhile: its deliveries are void
		case !ok:
			c.in = nil // channel closed: reopened on the next call
		default:
			c.fresh(d)
			if !take(*d) {
				break
			}
			yields := 0
		more:
			for c.in != nil {
				select {
				case d, ok := <-c.in:
					if !ok {
						c.in = nil
						break more
					}
					yields = 0
					c.fresh(&d)
					if !take(d) {
						break more
					}
				default:
					if yields == receiveYields {
						break more
					}
					runtime.Gosched() // see receiveYields
					yields++
				}
			}
			fill()
		}
	}
	var spill []amqp.Delivery
	if len(out) == 0 && len(c.reds) > 0 && len(c.pending) == 0 {
		out, c.reds = append(out, c.reds[0]), c.reds[1:] // alone, after the window
		if !c.keyOrder && len(c.reds) > 0 {
			spill, c.reds = c.reds, nil // off the channel before it runs: see spill
		}
	}
	ds := c.handOut(p.Queue, out)
	if c.isolate && len(out) == 1 && redelivered(&out[0]) {
		c.alone = out[0].DeliveryTag
	}
	spilled := c.handOut(p.Queue, spill)
	c.mu.Unlock()
	if len(spilled) > 0 {
		c.spill(ctx, spilled)
	}
	return ds, nil
}

// receiveYields: amqp091-go hands deliveries over an unbuffered channel,
// one at a time, from a goroutine that holds what the broker pushed; a
// read without waiting finds the next one only once that goroutine has run
// again. So when the channel looks empty, Receive yields the processor a
// few times before it ends the batch. Without it a batch held one or two
// deliveries whatever the prefetch, and a wrapper that costs a round trip
// per batch (the ledger on PostgreSQL: 20,564 Receive calls for 21,200
// messages) ran one message per round trip — 1,000 msg/s with 256
// messages pushed and waiting. One yield was not always enough under the
// race detector (63–106 calls for 299 waiting deliveries); four cost a few
// microseconds per batch when the channel really is empty.
const receiveYields = 16

// handOut turns raw deliveries of the consumer's channel into held
// transport deliveries. c.mu is held.
func (c *consumer) handOut(queue string, raws []amqp.Delivery) []*transport.Delivery {
	ds := make([]*transport.Delivery, len(raws))
	for i := range raws {
		raw := &raws[i]
		d := delivery(queue, raw)
		d.Receipt = receipt{c: c, ch: c.ch, tag: raw.DeliveryTag, raw: raw}
		c.held[raw.DeliveryTag] = true
		ds[i] = d
	}
	return ds
}

// spill gives back the other redeliveries the consumer holds before one
// redelivery runs alone. Competing consumers make this necessary: when
// one dies, its whole window returns to the queue with raised counts and
// the broker pushes several of those redeliveries into another consumer's
// window at once. Running one alone while the others wait on the channel
// exposes them: if the one is the poison, they come back counted once more,
// again and again, and reach delivery_limit with it (seen with three
// consumers: five innocent messages dead-lettered beside the poison). So
// they are given back as copies (Transport.giveBack with their count
// carried: the give-back neither raises it nor resets it), and when the
// one runs, nothing else is on the channel. A give-back that fails leaves
// its deliveries to be handed out alone later, as before, exposed but
// never lost.
func (c *consumer) spill(ctx context.Context, ds []*transport.Delivery) {
	errs := c.t.giveBack(ctx, ds)
	var back []amqp.Delivery
	for i, err := range errs {
		if err == nil {
			continue
		}
		rc := ds[i].Receipt.(receipt)
		c.t.opts.Logger.Warn("rabbitmq: could not give back a redelivery held beside another; it waits on the channel and runs alone later",
			"queue", c.key.queue, "event_id", ds[i].EventID, "err", err)
		back = append(back, *rc.raw)
	}
	if len(back) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, raw := range back {
		if c.ch == ds[0].Receipt.(receipt).ch && c.held[raw.DeliveryTag] {
			delete(c.held, raw.DeliveryTag)
			c.reds = append(c.reds, raw)
		}
	}
}

// fresh notes d, read from the current subscription, and releases the
// deliveries that can no longer be read (see releaseHoles).
func (c *consumer) fresh(d *amqp.Delivery) {
	c.saw(d.DeliveryTag)
	if len(c.holes) > 0 {
		c.releaseHoles()
	}
}

// waitDelivery waits up to wait for a delivery on in. It returns the
// delivery and true; nil and true when none came in time; nil and false
// when in was closed.
func waitDelivery(ctx context.Context, in <-chan amqp.Delivery, wait time.Duration) (*amqp.Delivery, bool, error) {
	select { // already there: no timer needed (the common case under load)
	case d, ok := <-in:
		if !ok {
			return nil, false, nil
		}
		return &d, true, nil
	default:
	}
	var timeout <-chan time.Time
	if wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		timeout = timer.C
	} else {
		closed := make(chan time.Time)
		close(closed)
		timeout = closed
	}
	select {
	case d, ok := <-in:
		if !ok {
			return nil, false, nil
		}
		return &d, true, nil
	case <-timeout:
		return nil, true, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// valid reports whether r can still be settled: it was received on the
// consumer's current channel and is held unsettled. c.mu is held.
func (r receipt) valid() bool {
	c := r.c
	return r.ch == c.ch && !r.ch.IsClosed() && c.held[r.tag]
}

// held returns nil when r can still be settled, else its lost() error.
func (r receipt) held() error {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	if !r.valid() {
		return r.lost()
	}
	return nil
}

func (r receipt) lost() error {
	return fmt.Errorf("rabbitmq: delivery %d on %s: channel closed, the broker requeued it: %w", r.tag, r.c.key.queue, transport.ErrLeaseLost)
}

// settle releases (nack with requeue) the receipts rcs[nacks] and then
// acknowledges rcs[acks], recording failures in errs. Acknowledgements are
// combined: when the k oldest unsettled deliveries of the channel are all
// in acks, one basic.ack with multiple set acknowledges them together, and
// the rest are acknowledged one by one. A multiple ack never covers a
// delivery that is not being acknowledged here: every delivery the channel
// holds with a lower tag — handed out and unsettled (held), received and
// not yet handed out (pending, reds), not read (holes) — bounds it, and
// deliveries still buffered in the client have higher tags than every
// delivery read so far.
func (c *consumer) settle(rcs []receipt, acks, nacks []int, errs []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range nacks {
		r := rcs[i]
		if !r.valid() {
			errs[i] = r.lost()
			continue
		}
		c.settled.note(1)
		if err := r.ch.Nack(r.tag, false, true); err != nil {
			errs[i] = fmt.Errorf("rabbitmq: release delivery %d on %s: %v: %w", r.tag, c.key.queue, err, transport.ErrLeaseLost)
			continue
		}
		delete(c.held, r.tag)
	}
	if c.alone != 0 && !c.held[c.alone] {
		c.alone = 0
	}
	valid := acks[:0:0]
	for _, i := range acks {
		if r := rcs[i]; !r.valid() {
			errs[i] = r.lost()
			continue
		}
		valid = append(valid, i)
	}
	if len(valid) == 0 {
		return
	}
	slices.SortFunc(valid, func(a, b int) int { return cmp.Compare(rcs[a].tag, rcs[b].tag) })
	// bound: the lowest tag held or pending that is not acknowledged here.
	mine := func(tag uint64) bool {
		_, ok := slices.BinarySearchFunc(valid, tag, func(i int, t uint64) int { return cmp.Compare(rcs[i].tag, t) })
		return ok
	}
	bound := uint64(math.MaxUint64)
	for tag := range c.held {
		if tag < bound && !mine(tag) {
			bound = tag
		}
	}
	for k := range c.pending {
		bound = min(bound, c.pending[k].DeliveryTag)
	}
	for k := range c.reds {
		bound = min(bound, c.reds[k].DeliveryTag)
	}
	for tag := range c.holes {
		// A delivery the client dropped (or not read yet): a multiple
		// ack past it would acknowledge a message no handler saw.
		bound = min(bound, tag)
	}
	prefix := 0
	for prefix < len(valid) && rcs[valid[prefix]].tag < bound {
		prefix++
	}
	ch := rcs[valid[0]].ch
	ack := func(idx []int, tag uint64, multiple bool) {
		c.settled.note(1)
		err := ch.Ack(tag, multiple)
		for _, i := range idx {
			if err != nil {
				errs[i] = fmt.Errorf("rabbitmq: ack delivery %d on %s: %v: %w", rcs[i].tag, c.key.queue, err, transport.ErrLeaseLost)
				continue
			}
			delete(c.held, rcs[i].tag)
		}
	}
	rest := valid
	if prefix >= 2 {
		ack(valid[:prefix], rcs[valid[prefix-1]].tag, true)
		rest = valid[prefix:]
	}
	for k := range rest {
		ack(rest[k:k+1], rcs[rest[k]].tag, false)
	}
	if c.alone != 0 && c.held[c.alone] && c.ch == ch {
		// A redelivery waits to run alone once these are settled. An ack
		// has no reply: if the redelivery kills the process right after,
		// acks still in the socket can be lost, and those deliveries come
		// back with raised counts. A synchronous call on the channel
		// returns only after the broker has processed every frame before
		// it. (basic.qos with the cautious prefetch: the consume is
		// cancelled or already at 1, so nothing changes.)
		if err := ch.Qos(1, 0, false); err != nil {
			c.t.opts.Logger.Warn("rabbitmq: flushing acknowledgements before a redelivery runs alone failed", "queue", c.key.queue, "err", err)
		}
	}
}

// RecoverLeases closes the channels of a consumer instance: the broker
// requeues its unacknowledged deliveries with their delivery counts raised,
// as when the instance's process dies.
func (t *Transport) RecoverLeases(ctx context.Context, p *transport.RecoverParams) (int, error) {
	t.mu.Lock()
	var cs []*consumer
	for k, c := range t.consumers {
		if k.instance == p.Consumer {
			cs = append(cs, c)
			delete(t.consumers, k)
		}
	}
	t.mu.Unlock()
	n := 0
	for _, c := range cs {
		c.mu.Lock()
		n += len(c.held) + len(c.pending) + len(c.reds)
		c.mu.Unlock()
		c.invalidate()
	}
	return n, nil
}

// heldCount counts the deliveries of queue this process holds unsettled.
// A consumer's lock is never taken with t.mu held: Receive holds the
// consumer's while it opens a channel, which takes t.mu.
func (t *Transport) heldCount(queue string) int64 {
	var n int64
	for _, c := range t.consumersOf(func(k consumerKey) bool { return k.queue == queue }) {
		c.mu.Lock()
		n += int64(len(c.held) + len(c.pending) + len(c.reds))
		c.mu.Unlock()
	}
	return n
}

// consumersOf returns the consumer instances whose keys match.
func (t *Transport) consumersOf(match func(consumerKey) bool) []*consumer {
	t.mu.Lock()
	defer t.mu.Unlock()
	var cs []*consumer
	for k, c := range t.consumers {
		if match(k) {
			cs = append(cs, c)
		}
	}
	return cs
}

// CancelConsume ends a consumer instance's subscription (basic.cancel)
// and keeps its channel open: what the broker had pushed stays on it,
// settleable, and Receive hands it out without subscribing again. The
// runtime processes and settles it before StopConsumer closes the channel,
// so that a graceful stop gives nothing back with a raised delivery count.
//
// A key-order consumer is not cancelled (see Receive: the broker would hand
// the queue to a standby while this one still works through its window):
// CancelConsume reports errors.ErrUnsupported, the runtime settles what it
// holds and StopConsumer closes the channel.
func (t *Transport) CancelConsume(ctx context.Context, p *transport.StopParams) error {
	// An instance that never received gets an entry too, so that Receive
	// does not subscribe for it now.
	c := t.consumer(p.Queue, p.Consumer, false)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keyOrder {
		return fmt.Errorf("rabbitmq: cancel the consumer of %s: it keeps per-key order, its channel is closed instead: %w", p.Queue, errors.ErrUnsupported)
	}
	c.canceled = true
	if c.ch != nil && !c.ch.IsClosed() && !c.dead {
		c.stop()
	}
	return nil
}

// StopConsumer ends a consumer instance's consumption: it cancels the
// consume and closes the channel, which gives back to the queue whatever
// the broker pushed but was never handed out (after CancelConsume and a
// drain, nothing). A key-order consumer's channel is closed without a
// cancel: the broker then returns what it had pushed first and only then
// activates a standby, which so receives the queue in order (a cancel would
// activate the standby at once).
func (t *Transport) StopConsumer(ctx context.Context, p *transport.StopParams) error {
	t.mu.Lock()
	k := consumerKey{p.Queue, p.Consumer}
	c, ok := t.consumers[k]
	delete(t.consumers, k)
	t.mu.Unlock()
	if !ok {
		return nil
	}
	c.mu.Lock()
	if !c.keyOrder {
		c.stop()
	}
	c.mu.Unlock()
	c.closeSettled(ctx) // see fence.go
	return nil
}
