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
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// redriveTargets resolves the transport of a redriven entry's source
// queue: its [[queue]] transport in --config; a queue not in the config is
// a queue of the SQLite store at --db.
type redriveTargets struct {
	env *dlqEnv
	url string
	mu  sync.Mutex // guards rmq: 'lily serve' runs redrives concurrently
	rmq *rabbitmq.Transport
}

func (r *redriveTargets) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rmq != nil {
		r.rmq.Close()
	}
}

// target returns the publisher for queue after checking that the queue
// still exists; an error names the queue and wraps
// transport.ErrUnknownQueue when it does not.
func (r *redriveTargets) target(ctx context.Context, queue string) (catalog.Publisher, error) {
	kind := lily.TransportSQLite
	if q, ok := r.env.queue(queue); ok {
		kind = q.Transport
	}
	switch kind {
	case lily.TransportSQLite:
		qs, err := r.env.sq.Queues(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(qs, queue) {
			return nil, fmt.Errorf("queue %q no longer exists in the SQLite store %s: %w (declare it again — its [[queue]] entry — or discard its entries)",
				queue, r.env.path, transport.ErrUnknownQueue)
		}
		return r.env.sq, nil
	case lily.TransportRabbitMQ:
		rmq, err := r.rabbit(ctx)
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
	return nil, fmt.Errorf("queue %q: redrive over transport %q is not supported yet", queue, kind)
}

func (r *redriveTargets) rabbit(ctx context.Context) (*rabbitmq.Transport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rmq != nil {
		return r.rmq, nil
	}
	url := r.url
	if url == "" {
		url = r.env.cfg.RabbitMQURL
	}
	rmq, err := openRabbit(ctx, url)
	if err != nil {
		return nil, err
	}
	r.rmq = rmq
	return rmq, nil
}

// ingestTick returns a function that drains the broker DLQs of the given
// queues into the catalog (for watching a redrive sample), or nil when
// none of them lives on a broker.
func (r *redriveTargets) ingestTick(queues []string) func(context.Context) error {
	var broker []string
	for _, q := range queues {
		if c, ok := r.env.queue(q); ok && c.Transport == lily.TransportRabbitMQ {
			broker = append(broker, q)
		}
	}
	if len(broker) == 0 {
		return nil
	}
	return func(ctx context.Context) error {
		rmq, err := r.rabbit(ctx)
		if err != nil {
			return err
		}
		for _, q := range broker {
			if _, err := r.env.cat.Ingest(ctx, rmq, q); err != nil {
				return fmt.Errorf("ingest %s: %w", q, err)
			}
		}
		return nil
	}
}

// progressBar draws a redrive's progress on a terminal, at most ten times
// a second; it draws nothing when w is not a terminal.
type progressBar struct {
	w    io.Writer
	on   bool
	last time.Time
}

func newProgressBar(w io.Writer) *progressBar {
	f, ok := w.(*os.File)
	return &progressBar{w: w, on: ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))}
}

func (p *progressBar) update(pr catalog.RedriveProgress) {
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

func (p *progressBar) finish() {
	if p.on && !p.last.IsZero() {
		fmt.Fprintln(p.w)
	}
	p.last = time.Time{}
}
