package lint

// Codes of the live findings about RabbitMQ (package brokers/livelint:
// CheckBroker, on what ReadBroker read from the management API).
const (
	// CodeTopologyDrift (error; warning for an unexpected argument): a
	// difference 'lily topology verify' reports and no finding below
	// explains better.
	CodeTopologyDrift = "topology-drift"
	// CodeDLXMissing (error): a queue dead-letters to an exchange that does
	// not exist.
	CodeDLXMissing = "dlx-missing"
	// CodeDLXUnbound (error): the dead-letter exchange routes the queue's
	// dead-letter routing key nowhere.
	CodeDLXUnbound = "dlx-unbound"
	// CodeAtLeastOnceWithoutRejectPublish (error): at-least-once
	// dead-lettering without x-overflow = reject-publish.
	CodeAtLeastOnceWithoutRejectPublish = "at-least-once-without-reject-publish"
	// CodeDeliveryLimitWithoutDLX (error): a quorum queue with a delivery
	// limit and no dead-letter exchange.
	CodeDeliveryLimitWithoutDLX = "delivery-limit-without-dlx"
	// CodeNoDeliveryLimit (error before RabbitMQ 4.0, warning from it): a
	// main quorum queue without x-delivery-limit.
	CodeNoDeliveryLimit = "no-delivery-limit"
	// CodeDLQMessageTTL (error): a dead-letter queue with a message TTL.
	CodeDLQMessageTTL = "dlq-message-ttl"
	// CodeTTLWithoutDLX (error): a main queue or retry bucket with a
	// message TTL and no dead-letter exchange.
	CodeTTLWithoutDLX = "ttl-without-dlx"
	// CodeDeliveryCountSemantics (warning): the broker is RabbitMQ 4.3 or
	// newer, which counts deliveries differently from 3.10.
	CodeDeliveryCountSemantics = "delivery-count-semantics"
	// CodeNotQuorum (error): a Lily main queue that is not a quorum queue
	// (classic, or a stream): nothing counts its deliveries.
	CodeNotQuorum = "queue-not-quorum"
	// CodeLiveChecksNotRun (error): the RabbitMQ management API could not
	// be read (a fresh broker has the plugin off), so only the checks AMQP
	// can make ran; it names the others, and enabling the plugin runs them.
	CodeLiveChecksNotRun = "live-checks-not-run"
)
