package cli

import "context"

// testSignals are the hooks through which this package's tests observe
// events that leave no other trace (River's testsignal pattern): a test
// puts them in Run's context with withTestSignals, the code below calls
// those that are set, and outside tests none is. Each is called on the
// goroutine of the event; it must not block.
type testSignals struct {
	// rulePass is called after each pass of 'lily serve''s redrive-rule
	// loop, whatever the pass did: a test that asserts "the rule fired
	// once" waits for passes that began after the firing.
	rulePass func()
}

// testSignalsKey is the context key of a *testSignals.
type testSignalsKey struct{}

// withTestSignals returns ctx carrying s.
func withTestSignals(ctx context.Context, s *testSignals) context.Context {
	return context.WithValue(ctx, testSignalsKey{}, s)
}

// signalRulePass calls the rulePass hook of ctx's test signals, if any.
func signalRulePass(ctx context.Context) {
	if s, _ := ctx.Value(testSignalsKey{}).(*testSignals); s != nil && s.rulePass != nil {
		s.rulePass()
	}
}
