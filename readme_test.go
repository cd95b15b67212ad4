package lily_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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
// The blocks are independent — every demo makes its own temporary files,
// queues and in-process brokers, and only one block uses the demo's
// RabbitMQ queues — so they run side by side: most of their time is spent
// waiting on brokers, not computing. Each block reports as a subtest, in
// the README's order. The binaries are built once first, so that the
// blocks' 'go run's share one build instead of racing to make it.
func TestReadmeCommands(t *testing.T) {
	blocks := readmeBlocks(t, "sh")
	if len(blocks) < 3 {
		t.Fatalf("found %d sh blocks in README.md, want the demo, reconcile and schedule commands", len(blocks))
	}
	if out, err := exec.Command("go", "build", "-o", os.DevNull, "./cmd/lily").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lily: %v\n%s", err, out)
	}
	if out, err := exec.Command("go", "build", "-o", os.DevNull, "./cmd/lily-demo").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lily-demo: %v\n%s", err, out)
	}
	// Up to six at a time, whatever -parallel says (it defaults to the
	// number of cores, and these blocks mostly wait).
	results := make([]chan result, len(blocks))
	sem := make(chan struct{}, 6)
	for i, b := range blocks {
		results[i] = make(chan result, 1)
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] <- runBlock(b, blockLimit)
		}()
	}
	for i, b := range blocks {
		t.Run(fmt.Sprintf("block%02d", i+1), func(t *testing.T) {
			r := <-results[i]
			if r.err != nil {
				t.Fatalf("README sh block %d failed: %v\n%s\n--- output ---\n%s", i+1, r.err, b, r.out)
			}
			if (strings.Contains(b, "lily demo") || strings.Contains(b, "lily-demo")) && !strings.Contains(string(r.out), "lost") {
				t.Errorf("README sh block %d: the demo printed no ledger:\n%s", i+1, r.out)
			}
		})
	}
}

// blockLimit bounds one README block: the slowest (a demo on an
// in-process Pub/Sub) takes about 30 s on a loaded machine. A block that
// hangs is killed with everything it started, and its output so far —
// bash -x shows the command it was in — explains the failure.
const blockLimit = 4 * time.Minute

// runBlock runs block with bash -euo pipefail -x in a process group of its
// own, killed whole past limit.
func runBlock(block string, limit time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euxo", "pipefail", "-c", block)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %s (a hang): %w", limit, err)
	}
	return result{out, err}
}

// result is what a README block printed and how it ended.
type result struct {
	out []byte
	err error
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
