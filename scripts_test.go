package lily_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestSuitetimeTimesEachPackage runs scripts/suitetime on a small package
// and checks its table: one row for the package, with a start, an end, a
// wall and a CPU time, then the totals and where the output went.
func TestSuitetimeTimesEachPackage(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("scripts/suitetime", "-run", "TestForReturnsOnceCondHolds", "./internal/waittest").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/suitetime: %v\n%s", err, out)
	}
	row := regexp.MustCompile(`(?m)^\s+\d+\s+\d+\s+\d+\s+\d+\.\d  internal/waittest$`)
	for _, want := range []*regexp.Regexp{row, regexp.MustCompile(`(?m)^test binaries: \d+ CPU-s$`), regexp.MustCompile(`(?m)^run: \d+ s wall$`)} {
		if !want.Match(out) {
			t.Errorf("scripts/suitetime printed no line matching %s:\n%s", want, out)
		}
	}
	if !strings.Contains(string(out), "(go test exit 0)") {
		t.Errorf("scripts/suitetime does not report go test's exit 0:\n%s", out)
	}
}
