package rabbitmq

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/lily-mq/lily/transport"
)

// TopologyVersion is the topology format version in every name Lily
// declares (docs/design.md §6). It is not a message schema version.
const TopologyVersion = "v2"

// Exchange is one exchange of the topology.
type Exchange struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Durable bool   `json:"durable"`
}

// Queue is one queue of the topology with its arguments.
type Queue struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
	// Role is "main", "retry" or "dlq".
	Role string `json:"role"`
	// Source is the main queue this queue serves.
	Source string `json:"source"`
}

// Binding binds a queue to an exchange.
type Binding struct {
	Exchange   string `json:"exchange"`
	Queue      string `json:"queue"`
	RoutingKey string `json:"routing_key"`
}

// Topology is everything Lily declares for a set of queues.
type Topology struct {
	Exchanges []Exchange `json:"exchanges"`
	Queues    []Queue    `json:"queues"`
	Bindings  []Binding  `json:"bindings"`
}

// RetryExchange returns the retry exchange of a main exchange.
func RetryExchange(exchange string) string { return exchange + ".retry." + TopologyVersion }

// DeadLetterExchange returns the dead-letter exchange of a main exchange.
func DeadLetterExchange(exchange string) string { return exchange + ".dlx." + TopologyVersion }

// BucketQueue returns the name of queue's retry bucket for delay ms.
func BucketQueue(queue string, ms int64) string {
	return queue + ".retry." + TopologyVersion + "." + strconv.FormatInt(ms, 10) + "ms"
}

// DeadLetterQueue returns the name of queue's dead-letter queue.
func DeadLetterQueue(queue string) string { return queue + ".dlq." + TopologyVersion }

// Plan computes the topology of docs/design.md §6 for the given queues. Exchanges
// shared by several queues appear once. It needs no broker.
func Plan(specs []transport.QueueSpec) (Topology, error) {
	var top Topology
	exchanges := map[string]Exchange{}
	for _, s := range specs {
		if s.Name == "" || s.Exchange == "" {
			return Topology{}, fmt.Errorf("rabbitmq topology: queue %q needs a name and an exchange", s.Name)
		}
		if s.DeliveryLimit < 1 {
			return Topology{}, fmt.Errorf("rabbitmq topology: queue %q: delivery_limit %d: must be >= 1", s.Name, s.DeliveryLimit)
		}
		dlx := DeadLetterExchange(s.Exchange)
		exchanges[s.Exchange] = Exchange{Name: s.Exchange, Type: "topic", Durable: true}
		exchanges[dlx] = Exchange{Name: dlx, Type: "direct", Durable: true}
		// A quorum queue with x-delivery-limit L hands a message out L+1
		// times (checked on 3.10.8), so L = delivery_limit - 1.
		mainArgs := map[string]any{
			"x-queue-type":              "quorum",
			"x-delivery-limit":          int64(s.DeliveryLimit - 1),
			"x-dead-letter-exchange":    dlx,
			"x-dead-letter-routing-key": s.Name,
			"x-dead-letter-strategy":    "at-least-once",
			"x-overflow":                "reject-publish",
		}
		if s.SingleActiveConsumer {
			// Per-key order (ordering park or block) holds only with one
			// consumer at a time; the others stand by.
			mainArgs["x-single-active-consumer"] = true
		}
		top.Queues = append(top.Queues, Queue{Name: s.Name, Role: "main", Source: s.Name, Arguments: mainArgs})
		keys := s.BindingKeys
		if len(keys) == 0 {
			keys = []string{s.Name}
		}
		for _, k := range keys {
			top.Bindings = append(top.Bindings, Binding{Exchange: s.Exchange, Queue: s.Name, RoutingKey: k})
		}
		if len(s.BucketsMillis) > 0 {
			rx := RetryExchange(s.Exchange)
			exchanges[rx] = Exchange{Name: rx, Type: "direct", Durable: true}
			for _, ms := range s.BucketsMillis {
				args := map[string]any{
					"x-queue-type":              "quorum",
					"x-message-ttl":             ms,
					"x-dead-letter-exchange":    "",
					"x-dead-letter-routing-key": s.Name,
					"x-dead-letter-strategy":    "at-least-once",
					"x-overflow":                "reject-publish",
				}
				if s.BucketMaxLength > 0 {
					args["x-max-length"] = s.BucketMaxLength
				}
				b := BucketQueue(s.Name, ms)
				top.Queues = append(top.Queues, Queue{Name: b, Role: "retry", Source: s.Name, Arguments: args})
				top.Bindings = append(top.Bindings, Binding{Exchange: rx, Queue: b, RoutingKey: b})
			}
		}
		dlqArgs := map[string]any{"x-queue-type": "quorum", "x-overflow": "reject-publish"}
		if s.DLQMaxLength > 0 {
			dlqArgs["x-max-length"] = s.DLQMaxLength
		}
		dlq := DeadLetterQueue(s.Name)
		top.Queues = append(top.Queues, Queue{Name: dlq, Role: "dlq", Source: s.Name, Arguments: dlqArgs})
		top.Bindings = append(top.Bindings, Binding{Exchange: dlx, Queue: dlq, RoutingKey: s.Name})
	}
	for _, e := range exchanges {
		top.Exchanges = append(top.Exchanges, e)
	}
	sort.Slice(top.Exchanges, func(i, j int) bool { return top.Exchanges[i].Name < top.Exchanges[j].Name })
	return top, nil
}
