package cli

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
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/lily-mq/lily/transport/pubsub"
)

// demoPubSubProject is the demo fake's project.
const demoPubSubProject = "lily-demo"

// demoPubSub is the demo's Pub/Sub: an in-process fake (pstest) that lives
// as long as the demo's parent process and listens on a real TCP port, so
// that the worker child processes reach it over gRPC like the service.
// The Pub/Sub API cannot count a subscription's messages, so the parent
// also serves the fake's own count (unacknowledged messages of the
// queue's topics) on a loopback HTTP port, for the ledger and the
// worker's quiet check.
type demoPubSub struct {
	srv      *pstest.Server // nil in a worker
	http     *http.Server
	endpoint string // the fake's gRPC address
	countURL string // the parent's count endpoint
	tr       *pubsub.Transport
	countMu  sync.Mutex // serializes count (pstest's records are shared)
}

// demoPubSubOptions are the demo's transport options: a 5 s ack deadline
// (a dead worker's deliveries come back after it; shorter ones let a
// loaded machine miss an extension, which raises a delivery attempt as on
// the real service), fast polling.
func demoPubSubOptions(endpoint string) pubsub.Options {
	return pubsub.Options{Project: demoPubSubProject, Endpoint: endpoint, Insecure: true, AckDeadline: 5 * time.Second,
		PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// openDemoPubSub starts the fake and its count endpoint (endpoint empty),
// or connects a worker to the parent's (endpoint and countURL given).
func openDemoPubSub(ctx context.Context, endpoint, countURL string) (*demoPubSub, error) {
	p := &demoPubSub{endpoint: endpoint, countURL: countURL}
	o := demoPubSubOptions(endpoint)
	if endpoint == "" {
		p.srv = pstest.NewServer()
		p.endpoint = p.srv.Addr
		o.Endpoint = p.srv.Addr
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.srv.Close()
			return nil, fmt.Errorf("demo: listen for the fake's count endpoint: %w", err)
		}
		p.countURL = "http://" + ln.Addr().String() + "/inflight"
		p.http = &http.Server{Handler: http.HandlerFunc(p.serveCount), ReadHeaderTimeout: 5 * time.Second}
		go p.http.Serve(ln)
		o.InFlight = func(_ context.Context, _ string, n pubsub.QueueNames) (int64, error) { return p.count(n), nil }
	} else {
		o.InFlight = p.fetchCount
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
func (p *demoPubSub) count(n pubsub.QueueNames) int64 {
	// Server.Messages refreshes the Acks of the same *Message values it
	// returned before: concurrent counts must not read them meanwhile.
	p.countMu.Lock()
	defer p.countMu.Unlock()
	prefix := "projects/" + demoPubSubProject + "/topics/"
	var c int64
	for _, m := range p.srv.Messages() {
		topic := strings.TrimPrefix(m.Topic, prefix)
		if (topic == n.Topic || topic == pubsub.ReturnTopic(n.Subscription) || strings.HasPrefix(topic, n.Subscription+".retry.")) && m.Acks == 0 {
			c++
		}
	}
	return c
}

func (p *demoPubSub) serveCount(w http.ResponseWriter, r *http.Request) {
	n := pubsub.QueueNames{Topic: r.URL.Query().Get("topic"), Subscription: r.URL.Query().Get("subscription")}
	fmt.Fprint(w, p.count(n))
}

// fetchCount asks the parent for the count.
func (p *demoPubSub) fetchCount(ctx context.Context, _ string, n pubsub.QueueNames) (int64, error) {
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
func (p *demoPubSub) where() string {
	return "an in-process Pub/Sub (pstest at " + p.endpoint + ")"
}

// Close closes the client, the count endpoint and the fake.
func (p *demoPubSub) Close() {
	if p.tr != nil {
		p.tr.Close()
	}
	if p.http != nil {
		p.http.Close()
	}
	if p.srv != nil {
		p.srv.Close()
	}
}
