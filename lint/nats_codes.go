package lint

// Codes of the live findings about NATS JetStream (package
// brokers/livelint: CheckNATS, on what ReadNATS read from the server).
const (
	// CodeNATSConsumerMissing (error): the stream or consumer of a nats
	// queue, or of a [[foreign_dlq]] kind = "jetstream", does not exist.
	CodeNATSConsumerMissing = "nats-consumer-missing"
	// CodeNATSMaxDeliverUnlimited (warning): a foreign consumer with
	// MaxDeliver -1 never gives up on a message, so the server sends no
	// MAX_DELIVERIES advisory: a poison message is redelivered forever and
	// only terminated messages reach the catalog.
	CodeNATSMaxDeliverUnlimited = "nats-max-deliver-unlimited"
	// CodeNATSBackOffBeyondMaxDeliver (warning): a consumer's BackOff has
	// more steps than MaxDeliver allows deliveries: the later steps never
	// run, and the retry span is shorter than it reads.
	CodeNATSBackOffBeyondMaxDeliver = "nats-backoff-beyond-max-deliver"
	// CodeNATSAdvisoryStreamMissing (error): no advisory stream keeps a
	// foreign consumer's advisories, so those published now are lost with
	// their failed messages' place in the catalog.
	CodeNATSAdvisoryStreamMissing = "nats-advisory-stream-missing"
	// CodeNATSDLQWorkQueue (warning): a dead-letter stream with work-queue
	// retention: operators cannot read it without taking messages off it.
	CodeNATSDLQWorkQueue = "nats-dlq-workqueue"
	// CodeNATSMaxDeliverCountsRetries (warning): a nats queue's consumer
	// has a MaxDeliver: Lily's retries (NakWithDelay) count as deliveries
	// on the server, which stops delivering at MaxDeliver — retries
	// included — with no Lily evidence.
	CodeNATSMaxDeliverCountsRetries = "nats-max-deliver-counts-retries"
)
