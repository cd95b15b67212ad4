package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/transport/pubsub"
)

// pubsubProject is the demo fake's project.
const pubsubProject = "lily-demo"

// pubsubBackend is the demo's Pub/Sub: an in-process fake
// (Emulators.PubSub) that lives as long as the demo's parent process and
// listens on a real TCP port, so that the worker child processes reach it
// over gRPC like the service. The Pub/Sub API cannot count a
// subscription's messages, so the parent also serves the fake's own count
// (unacknowledged messages of the queue's topics) on a loopback HTTP port,
// for the ledger and the worker's quiet check.
type pubsubBackend struct {
	fake     PubSubFake // nil in a worker
	http     *http.Server
	endpoint string // the fake's gRPC address
	countURL string // the parent's count endpoint
	tr       *pubsub.Transport
}

// pubsubOptions are the demo's transport options: a 5 s ack deadline
// (a dead worker's deliveries come back after it; shorter ones let a
// loaded machine miss an extension, which raises a delivery attempt as on
// the real service), fast polling.
func pubsubOptions(endpoint string) pubsub.Options {
	return pubsub.Options{Project: pubsubProject, Endpoint: endpoint, Insecure: true, AckDeadline: 5 * time.Second,
		PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// openPubSubBackend starts the fake and its count endpoint (the demo: no
// conn.pubsubEndpoint), or connects a worker to the parent's (endpoint and
// count URL given).
func openPubSubBackend(ctx context.Context, conn connection) (*pubsubBackend, error) {
	p := &pubsubBackend{endpoint: conn.pubsubEndpoint, countURL: conn.pubsubCount}
	if p.endpoint == "" {
		fake, err := conn.em.PubSub()
		if err != nil {
			return nil, fmt.Errorf("demo: start an in-process Pub/Sub: %w", err)
		}
		p.fake, p.endpoint = fake, fake.Addr()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("demo: listen for the fake's count endpoint: %w", err)
		}
		p.countURL = "http://" + ln.Addr().String() + "/inflight"
		p.http = &http.Server{Handler: http.HandlerFunc(p.serveCount), ReadHeaderTimeout: 5 * time.Second}
		go p.http.Serve(ln)
	}
	o := pubsubOptions(p.endpoint)
	o.InFlight = p.fetchCount
	if p.fake != nil {
		o.InFlight = func(_ context.Context, _ string, n pubsub.QueueNames) (int64, error) { return p.count(n), nil }
	}
	tr, err := pubsub.Open(ctx, o)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.tr = tr
	return p, nil
}

// count returns the fake's unacknowledged messages of a queue's main,
// retry-return and delay topics.
func (p *pubsubBackend) count(n pubsub.QueueNames) int64 {
	prefix := "projects/" + pubsubProject + "/topics/"
	return p.fake.Unacked(func(full string) bool {
		topic := strings.TrimPrefix(full, prefix)
		return topic == n.Topic || topic == pubsub.ReturnTopic(n.Subscription) || strings.HasPrefix(topic, n.Subscription+".retry.")
	})
}

func (p *pubsubBackend) serveCount(w http.ResponseWriter, r *http.Request) {
	n := pubsub.QueueNames{Topic: r.URL.Query().Get("topic"), Subscription: r.URL.Query().Get("subscription")}
	fmt.Fprint(w, p.count(n))
}

// fetchCount asks the parent for the count.
func (p *pubsubBackend) fetchCount(ctx context.Context, _ string, n pubsub.QueueNames) (int64, error) {
	u := p.countURL + "?topic=" + url.QueryEscape(n.Topic) + "&subscription=" + url.QueryEscape(n.Subscription)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("demo: count from the parent's fake: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// where describes the fake for the demo's first line.
func (p *pubsubBackend) where() string {
	return "an in-process Pub/Sub (pstest at " + p.endpoint + ")"
}

// Close closes the client, the count endpoint and the fake.
func (p *pubsubBackend) Close() {
	if p.tr != nil {
		p.tr.Close()
	}
	if p.http != nil {
		p.http.Close()
	}
	if p.fake != nil {
		p.fake.Close()
	}
}
