package transport

import "context"

// ConsumerState is what a consumer instance reports of itself to a
// Presence (docs/design.md §9.10).
type ConsumerState struct {
	// Queue is the queue consumed; Instance the consumer's instance ID.
	Queue    string
	Instance string
	// Name and Version identify the consuming code.
	Name    string
	Version string
	// Breaker is the circuit breaker's state ("closed", "open",
	// "half-open").
	Breaker string
	// Paused says the consumer has stopped taking messages because its
	// queue is paused: it reached the pause, not only heard of it.
	Paused bool
	// Stopped says the consumer stopped gracefully: its presence ends.
	Stopped bool
}

// Presence keeps consumers' heartbeats and tells them whether their queue
// is paused (docs/design.md §9.10). The runtime reports each state change
// (start, breaker, pause reached, stop) and asks QueuePaused before every
// fetch; writing the heartbeat and reading the pause happen off the
// message path, in the Presence's own loop. ledger.Accounted implements
// it for a consumer that counts through the catalog; presence.Beat is the
// implementation itself.
type Presence interface {
	// ReportConsumer records s; it does not fail the consumer (a catalog
	// that cannot be written shows the instance stale, nothing more).
	ReportConsumer(ctx context.Context, s ConsumerState)
	// QueuePaused reports whether queue is paused as last read, and a
	// channel closed when that may have changed.
	QueuePaused(queue string) (paused bool, changed <-chan struct{})
}
