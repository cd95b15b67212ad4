// Package soaktest is the switch between a test's sharp default size and
// its soak size. The default suite (the README's test command, what CI
// runs on every landing) runs the small cases that exercise each code path
// and its conservation check; 'go test -tags soak' (scripts/soak, run
// before a release) runs the long load, kill and scenario runs in full.
//
// It links nothing, so that the tests of every module may import it.
package soaktest

// On reports whether the tests were built with -tags soak.
const On = on

// Pick returns soak under -tags soak and sharp otherwise: a test's size
// (messages, kills, scenarios) in one expression.
func Pick[T any](sharp, soak T) T {
	if On {
		return soak
	}
	return sharp
}
