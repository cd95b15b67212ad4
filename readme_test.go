package lily_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlocks returns the fenced code blocks of README.md in the given
// language.
func readmeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?ms)^```" + lang + "\n(.*?)^```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestReadmeCommands runs every ```sh block of the README as written, from
// the module root, with bash -e: the README's commands must keep working.
// (The ```console block is the test command itself, which CI runs.)
func TestReadmeCommands(t *testing.T) {
	blocks := readmeBlocks(t, "sh")
	if len(blocks) < 3 {
		t.Fatalf("found %d sh blocks in README.md, want the demo, reconcile and schedule commands", len(blocks))
	}
	for i, b := range blocks {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", b)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("README sh block %d failed: %v\n%s\n--- output ---\n%s", i+1, err, b, out)
			continue
		}
		if (strings.Contains(b, "lily demo") || strings.Contains(b, "lily-demo")) && !strings.Contains(string(out), "lost") {
			t.Errorf("README sh block %d: the demo printed no ledger:\n%s", i+1, out)
		}
	}
}

// TestReadmeGoCompiles builds the README's Go program against this module.
func TestReadmeGoCompiles(t *testing.T) {
	blocks := readmeBlocks(t, "go")
	if len(blocks) == 0 {
		t.Fatal("no Go example in README.md")
	}
	for i, b := range blocks {
		dir, err := os.MkdirTemp(".", "readmecheck")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("go", "vet", "./"+filepath.Base(dir)).CombinedOutput()
		if err != nil {
			t.Errorf("README Go block %d does not compile: %v\n%s", i+1, err, out)
		}
	}
}

// TestCIRunsTheReadmeTestCommand: .ci/run's last command is the README's
// test command (its first ```console block), word for word, so that what
// CI proves is what a newcomer runs.
func TestCIRunsTheReadmeTestCommand(t *testing.T) {
	blocks := readmeBlocks(t, "console")
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```console block with the test command")
	}
	want := strings.TrimSpace(blocks[0])
	data, err := os.ReadFile(filepath.Join(".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if got := strings.TrimSpace(lines[len(lines)-1]); got != want {
		t.Errorf(".ci/run ends with %q; the README's test command is %q", got, want)
	}
}
