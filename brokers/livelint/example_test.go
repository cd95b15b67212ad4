package livelint_test

import (
	"fmt"

	"github.com/lily-mq/lily/brokers/livelint"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// CheckBroker judges what ReadBroker read from the management API; here a
// snapshot is written by hand: the dead-letter queue was declared by
// someone else with a 14-day message TTL.
func ExampleCheckBroker() {
	cfg, _ := config.ParseConfig([]byte(`
[[queue]]
name = "billing.invoiced"
transport = "rabbitmq"
owner = "billing"
`))
	b := livelint.Broker{Version: "3.10.8", Queues: []livelint.QueueState{{
		Name: rabbitmq.DeadLetterQueue("billing.invoiced"), Role: "dlq", Source: "billing.invoiced", Exists: true,
		Type:      "quorum",
		Arguments: map[string]any{"x-queue-type": "quorum", "x-overflow": "reject-publish", "x-message-ttl": 1209600000.0},
	}}}
	for _, f := range livelint.CheckBroker(cfg, b) {
		fmt.Printf("%s %s: %s\n", f.Severity, f.Code, f.What)
	}
	// Output:
	// error dlq-message-ttl: dead-letter queue billing.invoiced.dlq.v2 has a message TTL of 1209600000 ms (argument)
}
