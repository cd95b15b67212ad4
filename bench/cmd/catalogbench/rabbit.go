package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// rabbitRun is a fresh quorum queue declared by Lily's RabbitMQ transport
// (main queue, retry buckets, DLQ) and a consumer that drains it while the
// redrive runs, counting each event ID, so that the queue does not grow
// and a lost or doubled message shows.
type rabbitRun struct {
	tr   *rabbitmq.Transport
	spec transport.QueueSpec
	conn *amqp.Connection

	mu       sync.Mutex
	seen     map[string]int
	distinct int64
	doubled  int64
	last     time.Time
	changed  chan struct{}
	done     chan struct{} // closed when the consumer ends (nil: none started)
}

func openRabbit(ctx context.Context, url, queue string) (*rabbitRun, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url, Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("-amqp %s: %w", url, err)
	}
	qc := lily.QueueConfig{Name: queue, Transport: lily.TransportRabbitMQ}.WithDefaults()
	spec := qc.Spec()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{spec}}); err != nil {
		tr.Close()
		return nil, err
	}
	r := &rabbitRun{tr: tr, spec: spec, seen: map[string]int{}, changed: make(chan struct{}, 1)}
	if err := r.consume(url, queue); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// consume starts the counting consumer (automatic acks, a large prefetch:
// it only counts).
func (r *rabbitRun) consume(url, queue string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	r.conn = conn
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(2000, 0, false); err != nil {
		return err
	}
	ds, err := ch.Consume(queue, "catalogbench-counter", true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		for d := range ds {
			r.mu.Lock()
			r.seen[d.MessageId]++
			if r.seen[d.MessageId] == 1 {
				r.distinct++
			} else {
				r.doubled++
			}
			r.last = time.Now()
			r.mu.Unlock()
			select {
			case r.changed <- struct{}{}:
			default:
			}
		}
	}()
	return nil
}

// wait waits until n distinct messages arrived, or nothing arrived for 10
// seconds, then for one more second for extra copies.
func (r *rabbitRun) wait(ctx context.Context, n int) (int64, int64, error) {
	quiet := 10 * time.Second
	for {
		r.mu.Lock()
		distinct, last := r.distinct, r.last
		r.mu.Unlock()
		if distinct >= int64(n) || (!last.IsZero() && time.Since(last) > quiet) {
			break
		}
		select {
		case <-r.changed:
		case <-time.After(time.Second):
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.distinct, r.doubled, nil
}

// close stops the consumer and deletes the queues.
func (r *rabbitRun) close() {
	if r.conn != nil {
		r.conn.Close()
	}
	if r.done != nil {
		<-r.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.tr.DeleteQueues(ctx, r.spec)
	r.tr.Close()
}
