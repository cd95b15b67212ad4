package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// redriveTargets resolves the transport of a redriven entry's source
// queue: its [[queue]] transport in --config; a queue not in the config is
// a queue of the SQLite store at --db.
type redriveTargets struct {
	mu      sync.Mutex // guards brk: 'lily serve' runs redrives concurrently
	env     *dlqEnv
	url     string // --url
	brokers string // --brokers
	to      string // --to: a [[foreign_dlq]]'s entries go there instead of their origin
	// foreignTo: --to names no configured queue, so only entries of a
	// [[foreign_dlq]] may be redriven (to that broker queue).
	foreignTo bool
	brk       *brokers.Set
}

func (r *redriveTargets) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.brk != nil {
		r.brk.Close()
	}
}

// open returns the brokers of the configuration (connecting on first use).
func (r *redriveTargets) open() (*brokers.Set, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.brk == nil {
		b, err := openBrokers(r.env.cfg, r.url, r.brokers)
		if err != nil {
			return nil, err
		}
		r.brk = b
	}
	return r.brk, nil
}

// broker returns the broker transport of a configured queue.
func (r *redriveTargets) broker(ctx context.Context, q lily.QueueConfig) (brokers.Transport, error) {
	b, err := r.open()
	if err != nil {
		return nil, err
	}
	return b.ForQueue(ctx, q)
}

// target returns the publisher for queue after checking that the queue
// still exists; an error names the queue and wraps
// transport.ErrUnknownQueue when it does not.
func (r *redriveTargets) target(ctx context.Context, queue string) (redrive.Publisher, error) {
	if pub, ok, err := r.foreignTarget(ctx, queue); ok {
		return pub, err
	}
	if r.foreignTo {
		return nil, usagef("--to %q: not a [[queue]] of --config, and the selection holds entries of %s, which is not a [[foreign_dlq]]: only a foreign dead-letter queue's entries may go to an unconfigured queue (select them with --queue, or name a configured queue)", r.to, queue)
	}
	q, ok := r.env.queue(queue)
	if !ok || !brokers.IsBroker(q.Transport) {
		if r.env.sq == nil {
			return nil, fmt.Errorf("queue %q is not a broker's [[queue]] of --config (rabbitmq, kafka, sqs, pubsub, nats, azqueue), and the catalog %s is not a SQLite store that could hold it: %w (pass the --config that declares it)",
				queue, r.env.path, transport.ErrUnknownQueue)
		}
		qs, err := r.env.sq.Queues(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(qs, queue) {
			return nil, fmt.Errorf("queue %q no longer exists in the SQLite store %s: %w (declare it again — its [[queue]] entry — or discard its entries)",
				queue, r.env.path, transport.ErrUnknownQueue)
		}
		return r.env.sq, nil
	}
	brk, err := r.open()
	if err != nil {
		return nil, err
	}
	if q.Transport == lily.TransportSQS {
		return brk.SQSTarget(ctx, q)
	}
	if q.Transport == lily.TransportPubSub {
		// The redrive goes to the subscription's retry-return topic, read
		// by it alone (Publish refuses when it is missing, naming the fix):
		// the queue's topic would reach every subscription of it.
		return brk.PubSub(ctx)
	}
	if q.Transport == lily.TransportKafka {
		// Checked on the cluster before anything is sent; the redrive goes
		// to the queue's return topic (read by its consumer group alone)
		// with the message's key, so to the partition number the original
		// was in.
		k, err := brk.Kafka(ctx)
		if err == nil {
			_, err = k.Partitions(ctx, queue)
		}
		if errors.Is(err, transport.ErrUnknownQueue) {
			return nil, fmt.Errorf("topic %q no longer exists on the Kafka cluster: %w (create it again with 'lily topology apply', or discard its entries)",
				queue, transport.ErrUnknownQueue)
		}
		if err != nil {
			return nil, fmt.Errorf("check topic %q on the Kafka cluster: %w", queue, err)
		}
		return k, nil
	}
	if q.Transport == lily.TransportNATS || q.Transport == lily.TransportAzQueue {
		// The queue's own broker — never RabbitMQ's, which this fell
		// through to before: a NATS queue's redrive was refused as "no
		// longer exists" (or, had RabbitMQ held a queue of that name, sent
		// there). Checked before anything is sent: a NATS queue is its
		// stream and Lily's consumer on it (a redrive goes to the subject,
		// read by that consumer alone on a stream Lily declared), an Azure
		// queue its Storage queue.
		t, err := brk.ForQueue(ctx, q)
		if err != nil {
			return nil, err
		}
		if _, err := t.InFlight(ctx, queue); err != nil {
			if errors.Is(err, transport.ErrUnknownQueue) {
				return nil, fmt.Errorf("%s queue %q no longer exists: %w (create it again with 'lily topology apply', or discard its entries)",
					q.Transport, queue, err)
			}
			return nil, fmt.Errorf("check %s queue %q: %w", q.Transport, queue, err)
		}
		return t, nil
	}
	rmq, err := brk.RabbitMQ(ctx)
	if err != nil {
		return nil, err
	}
	// A passive declare of the queue alone (no spec registered, so no
	// buckets): a missing queue is a 404.
	if _, err := rmq.InFlight(ctx, queue); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return nil, fmt.Errorf("queue %q no longer exists on the broker: %w (apply the topology again with 'lily topology apply', or discard its entries)",
				queue, transport.ErrUnknownQueue)
		}
		return nil, fmt.Errorf("check queue %q on the broker: %w", queue, err)
	}
	return rmq, nil
}

// ingest drains the broker DLQs of the given queues into the catalog,
// each once however often it is named (for watching a redrive sample, and
// to bring the heads of held keys into the catalog).
func (r *redriveTargets) ingest(ctx context.Context, queues []string) error {
	seen := map[string]bool{}
	for _, q := range queues {
		c, ok := r.env.queue(q)
		if !ok || !brokers.IsBroker(c.Transport) || seen[q] {
			continue
		}
		seen[q] = true
		src, err := r.broker(ctx, c)
		if err != nil {
			return err
		}
		if _, err := r.env.cat.Ingest(ctx, src, c.Name); err != nil {
			return fmt.Errorf("ingest %s: %w", c.Name, err)
		}
	}
	return nil
}

// progressBar draws a long operation's progress on a terminal (a
// redrive's bar; the running count of an import, export, ingest, discard,
// erase or expiry), at most ten times a second; it draws nothing when w is
// not a terminal.
type progressBar struct {
	w     io.Writer
	on    bool
	last  time.Time
	start time.Time // of count
}

func newProgressBar(w io.Writer) *progressBar {
	return &progressBar{w: rawWriter(w), on: isTerminal(w)}
}

// isTerminal reports whether w (under its safeWriter) is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := rawWriter(w).(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func (p *progressBar) update(pr redrive.Progress) {
	if !p.on || pr.Total == 0 || (time.Since(p.last) < 100*time.Millisecond && pr.Done < pr.Total) {
		return
	}
	p.last = time.Now()
	const width = 30
	filled := width * pr.Done / pr.Total
	rate := float64(pr.Done) / max(pr.Elapsed.Seconds(), 1e-3)
	eta := ""
	if rate > 0 && pr.Done < pr.Total {
		eta = " ETA " + humanAge(time.Duration(float64(pr.Total-pr.Done)/rate*float64(time.Second)))
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d %3d%% %.0f/s%s   ", strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
		pr.Done, pr.Total, 100*pr.Done/pr.Total, rate, eta)
}

// count shows a running count of an operation whose total is not known
// (an import reading a stream, an export): "what n (detail) r/s", at most
// every 100 ms, on a terminal only.
func (p *progressBar) count(what string, n int, detail string) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.last = time.Now()
	rate := float64(n) / max(time.Since(p.start).Seconds(), 1e-3)
	if detail != "" {
		detail = " (" + detail + ")"
	}
	fmt.Fprintf(p.w, "\r%s %d%s %.0f/s   ", what, n, detail, rate)
}

func (p *progressBar) finish() {
	if p.on && !p.last.IsZero() {
		fmt.Fprintln(p.w)
	}
	p.last, p.start = time.Time{}, time.Time{}
}
