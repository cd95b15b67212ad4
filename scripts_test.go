package lily_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
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

// TestScriptsUseTheReadmesRaceFlags: the scripts build and run the tests
// with the race flags of the README's test command (.ci/run's last line,
// which docs/readme_test.go keeps equal to the README's).
func TestScriptsUseTheReadmesRaceFlags(t *testing.T) {
	t.Parallel()
	flags := raceFlags(t)
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	// The command as bash splits it: the gcflags value loses its quotes.
	words, err := exec.Command("bash", "-c", `printf '%s\n' `+strings.TrimPrefix(lines[len(lines)-1], "go test ")).Output()
	if err != nil {
		t.Fatalf("split the test command: %v", err)
	}
	have := strings.Fields(string(words))
	for _, f := range flags {
		if !slices.Contains(have, f) {
			t.Errorf("scripts/raceflags has %q; the README's test command %q does not", f, lines[len(lines)-1])
		}
	}
}

// raceFlags returns the race flags of the README's test command, as
// scripts/raceflags holds them. A go command that builds beside the suite
// (go vet of the soak tests) passes them too: with other flags it compiles
// modernc's SQLite a second time (17 packages, most of a minute of CPU).
func raceFlags(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("bash", "-c", `. scripts/raceflags && printf '%s\n' "${race_flags[@]}"`).Output()
	if err != nil {
		t.Fatalf("source scripts/raceflags: %v", err)
	}
	return strings.Fields(string(out))
}
