// Package lily is a consumer runtime for poison messages and dead letters.
//
// Every message a Consumer receives ends in exactly one durable terminal
// state: acknowledged, dead-lettered with its original bytes and the
// evidence needed to diagnose it, or discarded with a record. A transient
// failure is retried a bounded number of times, waiting in the broker (a
// delay bucket), never in the handler; a permanent failure is dead-lettered
// at once; a message that kills the process is counted by the broker (or
// before the handler runs) and dead-lettered at the delivery limit.
//
// A handler returns nil to acknowledge, Permanent(err) for a failure no
// retry can fix, or any other error for a transient failure:
//
//	h := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
//		var o Order
//		if err := json.Unmarshal(d.Body, &o); err != nil {
//			return lily.Permanent(err)
//		}
//		return store(ctx, o) // a transient error is retried
//	})
//
// Queues are configured by QueueConfig: built in Go, or read from the
// [[queue]] entries of a lily.toml file by package config (this package
// imports no file-format library). Transports live in their own packages
// (transport/sqlite is the embedded default).
package lily
