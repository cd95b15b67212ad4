package testparallel_test

import (
	"flag"
	"testing"

	"github.com/lily-mq/lily/internal/testparallel"
)

// TestDefaultKeepsAnExplicitValue: the command line's -test.parallel wins;
// otherwise Default sets it.
func TestDefaultKeepsAnExplicitValue(t *testing.T) {
	f := flag.Lookup("test.parallel")
	if f == nil {
		t.Fatal("no -test.parallel flag in a test binary")
	}
	before := f.Value.String()
	t.Cleanup(func() { _ = f.Value.Set(before) })
	explicit := false
	flag.Visit(func(g *flag.Flag) { explicit = explicit || g.Name == "test.parallel" })
	testparallel.Default(7)
	want := "7"
	if explicit {
		want = before
	}
	if got := f.Value.String(); got != want {
		t.Errorf("-test.parallel %s after Default(7) (set on the command line: %v), want %s", got, explicit, want)
	}
}
