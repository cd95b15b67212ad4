package livelint

import (
	"context"
	"encoding/json"
	"net/url"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// RabbitMQ reads the broker behind m (ReadBroker) and judges it against the
// configuration's queues of transport "rabbitmq" (CheckBroker). It returns
// no findings when no queue uses RabbitMQ, and an error when the
// management API cannot be read.
func RabbitMQ(ctx context.Context, cfg config.Config, m *rabbitmq.Management) ([]lint.Finding, error) {
	b, err := ReadBroker(ctx, cfg, m)
	if err != nil {
		return nil, err
	}
	return CheckBroker(cfg, b), nil
}

// RabbitMQSpecs returns the queue specs of the configuration's queues of
// transport "rabbitmq", with defaults applied.
func RabbitMQSpecs(cfg config.Config) []transport.QueueSpec {
	var specs []transport.QueueSpec
	for _, q := range cfg.WithDefaults().Queues {
		if q.Transport == lily.TransportRabbitMQ {
			specs = append(specs, q.Spec())
		}
	}
	return specs
}

// ReadBroker reads through the management API behind m what CheckBroker
// needs: the broker version (/api/overview), 'lily topology verify's
// differences (m.Verify), every planned queue with its type, arguments and
// effective policy, the exchanges those queues dead-letter to with their
// bindings, and the queues named as default-exchange dead-letter targets.
// It only reads.
func ReadBroker(ctx context.Context, cfg config.Config, m *rabbitmq.Management) (Broker, error) {
	cfg = cfg.WithDefaults()
	specs := RabbitMQSpecs(cfg)
	if len(specs) == 0 {
		return Broker{}, nil
	}
	top, err := rabbitmq.Plan(specs)
	if err != nil {
		return Broker{}, err
	}
	b := Broker{Topology: top, Exchanges: map[string]ExchangeState{}, OtherQueues: map[string]bool{}}
	var ov struct {
		Version string `json:"rabbitmq_version"`
	}
	if _, err := m.Get(ctx, "/api/overview", &ov); err != nil {
		return Broker{}, err
	}
	b.Version = ov.Version
	if b.Differences, err = m.Verify(ctx, top); err != nil {
		return Broker{}, err
	}
	for _, pq := range top.Queues {
		q, err := readQueue(ctx, m, pq.Name)
		if err != nil {
			return Broker{}, err
		}
		q.Role, q.Source = pq.Role, pq.Source
		b.Queues = append(b.Queues, q)
	}
	for _, q := range b.Queues {
		if !q.Exists {
			continue
		}
		v, _, ok := q.Effective("x-dead-letter-exchange")
		dlx, _ := v.(string)
		switch {
		case !ok:
		case dlx == "":
			for _, k := range deadLetterKeys(cfg, q) {
				if _, seen := b.OtherQueues[k]; seen || planned(top, k) {
					continue
				}
				other, err := readQueue(ctx, m, k)
				if err != nil {
					return Broker{}, err
				}
				b.OtherQueues[k] = other.Exists
			}
		default:
			if _, seen := b.Exchanges[dlx]; seen {
				continue
			}
			ex, err := readExchange(ctx, m, dlx)
			if err != nil {
				return Broker{}, err
			}
			b.Exchanges[dlx] = ex
		}
	}
	return b, nil
}

// planned reports whether name is a queue of the topology.
func planned(top rabbitmq.Topology, name string) bool {
	for _, q := range top.Queues {
		if q.Name == name {
			return true
		}
	}
	return false
}

// readQueue reads one queue; Exists is false on 404.
func readQueue(ctx context.Context, m *rabbitmq.Management, name string) (QueueState, error) {
	var got struct {
		Type           string          `json:"type"`
		Arguments      map[string]any  `json:"arguments"`
		Policy         *string         `json:"policy"`
		OperatorPolicy *string         `json:"operator_policy"`
		Effective      json.RawMessage `json:"effective_policy_definition"`
	}
	found, err := m.Get(ctx, "/api/queues/"+m.VHostPath()+"/"+url.PathEscape(name), &got)
	if err != nil || !found {
		return QueueState{Name: name}, err
	}
	q := QueueState{Name: name, Exists: true, Type: got.Type, Arguments: got.Arguments}
	for _, p := range []*string{got.Policy, got.OperatorPolicy} {
		if p != nil && *p != "" {
			if q.Policy != "" {
				q.Policy += ", "
			}
			q.Policy += *p
		}
	}
	// An empty definition may come as [] rather than {}.
	_ = json.Unmarshal(got.Effective, &q.PolicyDefinition)
	return q, nil
}

// readExchange reads one exchange and the bindings it is the source of.
func readExchange(ctx context.Context, m *rabbitmq.Management, name string) (ExchangeState, error) {
	var got struct {
		Type      string         `json:"type"`
		Arguments map[string]any `json:"arguments"`
		Policy    string         `json:"policy"`
	}
	base := "/api/exchanges/" + m.VHostPath() + "/" + url.PathEscape(name)
	found, err := m.Get(ctx, base, &got)
	if err != nil || !found {
		return ExchangeState{Name: name}, err
	}
	ex := ExchangeState{Name: name, Exists: true, Type: got.Type}
	ex.AlternateExchange, _ = got.Arguments["alternate-exchange"].(string)
	if ex.AlternateExchange == "" && got.Policy != "" {
		var pol struct {
			Definition map[string]any `json:"definition"`
		}
		if _, err := m.Get(ctx, "/api/policies/"+m.VHostPath()+"/"+url.PathEscape(got.Policy), &pol); err != nil {
			return ExchangeState{}, err
		}
		ex.AlternateExchange, _ = pol.Definition["alternate-exchange"].(string)
	}
	var bs []struct {
		Destination     string `json:"destination"`
		DestinationType string `json:"destination_type"`
		RoutingKey      string `json:"routing_key"`
	}
	if _, err := m.Get(ctx, base+"/bindings/source", &bs); err != nil {
		return ExchangeState{}, err
	}
	for _, b := range bs {
		ex.Bindings = append(ex.Bindings, BindingState(b))
	}
	return ex, nil
}
