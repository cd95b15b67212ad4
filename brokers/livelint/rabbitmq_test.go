package livelint

import (
	"strings"
	"testing"

	"github.com/lily-mq/lily/transport/rabbitmq"
)

// rabbitConfig is one RabbitMQ queue with retries.
const rabbitConfig = `
[[queue]]
name = "orders.created"
transport = "rabbitmq"
owner = "orders"
retry_attempts = 1
`

// planned returns the broker snapshot of a topology applied as planned.
func plannedBroker(t *testing.T, version string) Broker {
	t.Helper()
	top, err := rabbitmq.Plan(RabbitMQSpecs(parse(t, rabbitConfig)))
	if err != nil {
		t.Fatal(err)
	}
	b := Broker{Version: version, Topology: top, Exchanges: map[string]ExchangeState{}, OtherQueues: map[string]bool{}}
	for _, q := range top.Queues {
		args := map[string]any{}
		for k, v := range q.Arguments {
			if n, ok := number(v); ok {
				v = n
			}
			args[k] = v
		}
		b.Queues = append(b.Queues, QueueState{Name: q.Name, Role: q.Role, Source: q.Source, Exists: true, Type: "quorum", Arguments: args})
	}
	b.Exchanges["orders.dlx.v2"] = ExchangeState{Name: "orders.dlx.v2", Exists: true, Type: "direct",
		Bindings: []BindingState{{Destination: "orders.created.dlq.v2", DestinationType: "queue", RoutingKey: "orders.created"}}}
	return b
}

// queue returns a pointer to the snapshot's queue of the given role.
func (b *Broker) queue(role string) *QueueState {
	for i := range b.Queues {
		if b.Queues[i].Role == role {
			return &b.Queues[i]
		}
	}
	return nil
}

func TestCheckBrokerPlannedTopologyIsClean(t *testing.T) {
	if fs := CheckBroker(parse(t, rabbitConfig), plannedBroker(t, "3.10.8")); len(fs) != 0 {
		t.Errorf("findings on the planned topology: %v", codes(fs))
	}
}

func TestCheckBrokerRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version string
		change  func(b *Broker)
		want    string
	}{
		{"dlq ttl from a policy", "3.10.8", func(b *Broker) {
			q := b.queue("dlq")
			q.Policy, q.PolicyDefinition = "expire-all", map[string]any{"message-ttl": 60000.0}
		}, "error dlq-message-ttl"},
		{"bucket without dlx", "3.10.8", func(b *Broker) {
			delete(b.queue("retry").Arguments, "x-dead-letter-exchange")
		}, "error ttl-without-dlx"},
		{"no delivery limit on 3.10", "3.10.8", func(b *Broker) {
			delete(b.queue("main").Arguments, "x-delivery-limit")
		}, "error no-delivery-limit"},
		{"no delivery limit on 4.0", "4.0.5", func(b *Broker) {
			delete(b.queue("main").Arguments, "x-delivery-limit")
			b.queue("dlq").Arguments["x-delivery-limit"] = -1.0
		}, "warning no-delivery-limit"},
		{"dlq with 4.0's default limit", "4.0.5", func(b *Broker) {}, "error delivery-limit-without-dlx"},
		{"delivery limit switched off", "4.0.5", func(b *Broker) {
			b.queue("main").Arguments["x-delivery-limit"] = -1.0
			b.queue("dlq").Arguments["x-delivery-limit"] = -1.0
		}, "error no-delivery-limit"},
		{"delivery limit without dlx", "3.10.8", func(b *Broker) {
			delete(b.queue("main").Arguments, "x-dead-letter-exchange")
		}, "error delivery-limit-without-dlx"},
		{"4.0 default limit without dlx", "4.1.0", func(b *Broker) {
			delete(b.queue("main").Arguments, "x-dead-letter-exchange")
			delete(b.queue("main").Arguments, "x-delivery-limit")
			b.queue("dlq").Arguments["x-delivery-limit"] = -1.0
		}, "warning no-delivery-limit,error delivery-limit-without-dlx"},
		{"at-least-once with drop-head", "3.10.8", func(b *Broker) {
			b.queue("main").Arguments["x-overflow"] = "drop-head"
		}, "error at-least-once-without-reject-publish"},
		{"dlx missing", "3.10.8", func(b *Broker) {
			b.Exchanges["orders.dlx.v2"] = ExchangeState{Name: "orders.dlx.v2"}
		}, "error dlx-missing"},
		{"dlx unbound", "3.10.8", func(b *Broker) {
			b.Exchanges["orders.dlx.v2"] = ExchangeState{Name: "orders.dlx.v2", Exists: true, Type: "direct",
				Bindings: []BindingState{{Destination: "x", RoutingKey: "other"}}}
		}, "error dlx-unbound"},
		{"dlx unbound but alternate exchange", "3.10.8", func(b *Broker) {
			b.Exchanges["orders.dlx.v2"] = ExchangeState{Name: "orders.dlx.v2", Exists: true, Type: "direct", AlternateExchange: "ae"}
		}, ""},
		{"topic dlx with a matching pattern", "3.10.8", func(b *Broker) {
			b.Exchanges["orders.dlx.v2"] = ExchangeState{Name: "orders.dlx.v2", Exists: true, Type: "topic",
				Bindings: []BindingState{{Destination: "x", RoutingKey: "orders.#"}}}
		}, ""},
		{"bucket returns to a missing queue", "3.10.8", func(b *Broker) {
			b.queue("retry").Arguments["x-dead-letter-routing-key"] = "nowhere"
		}, "error dlx-unbound"},
		{"broker 4.3", "4.3.0", func(b *Broker) {
			b.queue("dlq").PolicyDefinition = map[string]any{"delivery-limit": -1.0}
		}, "warning delivery-count-semantics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := plannedBroker(t, tc.version)
			tc.change(&b)
			if got := strings.Join(codes(CheckBroker(parse(t, rabbitConfig), b)), ","); got != tc.want {
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDriftIsExplainedOnce(t *testing.T) {
	b := plannedBroker(t, "3.10.8")
	dlq := b.queue("dlq")
	dlq.Arguments["x-message-ttl"] = 1000.0
	dlq.Arguments["x-max-priority"] = 10.0
	b.Differences = []rabbitmq.Difference{
		{Kind: "argument", Name: dlq.Name, Problem: "unexpected", Detail: "x-message-ttl = 1000"},
		{Kind: "argument", Name: dlq.Name, Problem: "unexpected", Detail: "x-max-priority = 10"},
		{Kind: "queue", Name: "orders.created.retry.v2.1000ms", Problem: "missing", Detail: "retry queue of orders.created"},
	}
	fs := CheckBroker(parse(t, rabbitConfig), b)
	got := strings.Join(codes(fs), ",")
	if got != "error dlq-message-ttl,warning topology-drift,error topology-drift" {
		t.Fatalf("findings %q", got)
	}
	if !strings.Contains(fs[1].What, "x-max-priority") || fs[1].Queue != "orders.created" {
		t.Errorf("unexpected-argument drift %+v", fs[1])
	}
	if !strings.Contains(fs[2].Why, "not retried") {
		t.Errorf("missing-bucket drift why %q", fs[2].Why)
	}
}

func TestEffectivePrecedence(t *testing.T) {
	q := QueueState{Policy: "p",
		Arguments:        map[string]any{"x-message-ttl": 5000.0, "x-dead-letter-exchange": "arg"},
		PolicyDefinition: map[string]any{"message-ttl": 1000.0, "dead-letter-exchange": "pol", "overflow": "reject-publish"}}
	for arg, want := range map[string]string{
		"x-message-ttl":          "1000 policy \"p\"", // the smaller TTL applies
		"x-dead-letter-exchange": "arg argument",      // the argument wins
		"x-overflow":             "reject-publish policy \"p\"",
	} {
		v, from, ok := q.Effective(arg)
		if got := fmtValue(v) + " " + from; !ok || got != want {
			t.Errorf("%s: %q, want %q", arg, got, want)
		}
	}
}

func TestTopicMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, key string
		want         bool
	}{
		{"orders.created", "orders.created", true},
		{"orders.*", "orders.created", true},
		{"orders.*", "orders.created.eu", false},
		{"orders.#", "orders", true},
		{"#", "a.b.c", true},
		{"*.created", "orders.created", true},
		{"#.eu", "orders.created.eu", true},
		{"payments.*", "orders.created", false},
	} {
		if got := topicMatch(strings.Split(tc.pattern, "."), strings.Split(tc.key, ".")); got != tc.want {
			t.Errorf("%s ~ %s = %t", tc.pattern, tc.key, got)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"3.10.8": false, "4.2.9": false, "4.3.0": true, "4.3.0-rc.1": true, "5.0": true, "": false, "x": false} {
		if got := versionAtLeast(v, 4, 3); got != want {
			t.Errorf("%q >= 4.3: %t", v, got)
		}
	}
}
