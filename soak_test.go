package lily_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// soakSwitch is the package whose build-tag constant sizes the long runs.
const soakSwitch = "github.com/lily-mq/lily/internal/soaktest"

// TestSoakTestsCompile: the tests that scripts/soak runs at full size
// (go test -tags soak) — those sized by soaktest, and the soak-only ones
// in *_soak_test.go files — compile and vet clean, so that a release's
// soak run fails on what it finds, not on code the default suite never
// builds.
func TestSoakTestsCompile(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-tags", "soak", "-f",
		"{{.ImportPath}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}", "work").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -tags soak work: %v\n%s", err, out)
	}
	var pkgs []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		soakOnly := slices.ContainsFunc(f[1:], func(s string) bool { return strings.HasSuffix(s, "_soak_test.go") })
		if len(f) > 1 && (slices.Contains(f[1:], soakSwitch) || soakOnly) {
			pkgs = append(pkgs, f[0])
		}
	}
	if len(pkgs) == 0 {
		t.Fatalf("no package's tests import %s: scripts/soak would run the default sizes", soakSwitch)
	}
	// The test command's race flags: vet type-checks against the packages
	// the suite compiles anyway; with other flags a fresh machine compiles
	// every test dependency (modernc's SQLite among them) a second time for
	// this check alone.
	args := append(append([]string{"vet"}, raceFlags(t)...), "-tags", "soak")
	if out, err := exec.Command("go", append(args, pkgs...)...).CombinedOutput(); err != nil {
		t.Errorf("go %s %s: %v\n%s", strings.Join(args, " "), strings.Join(pkgs, " "), err, out)
	}
}
