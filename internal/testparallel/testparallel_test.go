package testparallel_test

import (
	"flag"
	"os"
	"os/exec"
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

// TestChildrenExitAtOnce: a child started after ChildrenExitAtOnce
// inherits GORACE=atexit_sleep_ms=0; an explicit GORACE is kept.
func TestChildrenExitAtOnce(t *testing.T) {
	t.Setenv("GORACE", "halt_on_error=1")
	testparallel.ChildrenExitAtOnce()
	if got := os.Getenv("GORACE"); got != "halt_on_error=1" {
		t.Errorf("GORACE %q after ChildrenExitAtOnce with GORACE set, want it kept", got)
	}
	os.Unsetenv("GORACE") // t.Setenv restores it at the end
	testparallel.ChildrenExitAtOnce()
	out, err := exec.Command("sh", "-c", `printf %s "$GORACE"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "atexit_sleep_ms=0" {
		t.Errorf("a child sees GORACE=%q, want atexit_sleep_ms=0", out)
	}
}
