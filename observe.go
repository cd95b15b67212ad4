package lily

import "context"

// observerKey is the context key of the hooks of the consumer whose
// handler runs under a context.
type observerKey struct{}

// withObserver returns ctx carrying observe, the consumer's hooks.
func withObserver(ctx context.Context, observe func(context.Context, Event)) context.Context {
	return context.WithValue(ctx, observerKey{}, observe)
}

// Observe reports e to the hooks of the Consumer whose handler runs under
// ctx (ConsumerOptions.Hooks); outside a handler it does nothing. Helpers
// that run inside a handler, such as package inbox, report what they did
// through it, so that a metrics hook on the consumer counts it.
func Observe(ctx context.Context, e Event) {
	if f, ok := ctx.Value(observerKey{}).(func(context.Context, Event)); ok {
		f(ctx, e)
	}
}
