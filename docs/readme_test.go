// Package docs_test runs the commands of the README and of these pages as
// written, vets their Go programs and checks their links. It is a package
// of its own, beside the root package's tests, because on a fresh machine
// its builds (lily and lily-demo, without -race, as the README's 'go run'
// and 'go install' build them) and its demos took most of go test's 10
// minutes per package, which the root package's own tests then exceeded.
package docs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
)

// TestMain runs the tests from the repository's root, where the README's
// commands are run from and the pages are named relative to.
func TestMain(m *testing.M) {
	if err := os.Chdir(".."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// readmeBlocks returns the fenced code blocks of README.md in the given
// language.
func readmeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	return fileBlocks(t, "README.md", lang)
}

// fileBlocks returns the fenced code blocks of a Markdown file in the
// given language.
func fileBlocks(t *testing.T, path, lang string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
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

// docPages is every page whose commands are run as written: the README and
// every document under docs/ but the benchmark results, whose commands each
// measure for minutes against peers (they are run by hand, in one window,
// and their output is the page itself).
func docPages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{"README.md"}
	for _, d := range docs {
		if filepath.Base(d) != "benchmarks.md" {
			pages = append(pages, d)
		}
	}
	return pages
}

// docBlock is one fenced block of a page.
type docBlock struct {
	name, text string
}

// docBlocks returns the blocks in lang of every page of docPages, named
// page#NN in their pages' order.
func docBlocks(t *testing.T, lang string) []docBlock {
	t.Helper()
	var out []docBlock
	for _, p := range docPages(t) {
		for i, b := range fileBlocks(t, p, lang) {
			out = append(out, docBlock{fmt.Sprintf("%s#%02d", filepath.ToSlash(p), i+1), b})
		}
	}
	return out
}

// TestReadmeCommands runs every ```sh block of the README and of the
// documents under docs/ as written, from the module root, with bash -e: the
// commands a reader copies must keep working. (The README's ```console
// block is the test command itself, which CI runs.) The blocks are
// independent — every demo makes its own temporary files, queues and
// in-process brokers, and only one block uses the demo's RabbitMQ queues —
// so they run side by side: most of their time is spent waiting on
// brokers, not computing. Each block reports as a subtest named after its
// page and number. The pages run `lily` and `lily-demo` as the README's
// 'go install' puts them on PATH: they are built once first, from this
// tree, into a directory of the test's own that is first on PATH (GOBIN
// too, so that the README's own 'go install' lands there). Built once,
// they cost one build where 45 'go run's cost a minute of CPU checking that
// nothing changed.
func TestReadmeCommands(t *testing.T) {
	blocks := docBlocks(t, "sh")
	if len(readmeBlocks(t, "sh")) < 2 {
		t.Fatalf("found %d sh blocks in README.md, want the demo and the install", len(readmeBlocks(t, "sh")))
	}
	bin := t.TempDir()
	for _, cmd := range []string{"lily", "lily-demo"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "./cmd/"+cmd).CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", cmd, err, out)
		}
	}
	env := append(os.Environ(), "GOBIN="+bin, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	// Up to six at a time, whatever -parallel says (it defaults to the
	// number of cores, and these blocks mostly wait).
	results := make([]chan result, len(blocks))
	sem := make(chan struct{}, 6)
	for i, b := range blocks {
		results[i] = make(chan result, 1)
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] <- runBlock(b.text, env, blockLimit)
		}()
	}
	for i, b := range blocks {
		t.Run(b.name, func(t *testing.T) {
			r := <-results[i]
			if r.err != nil {
				t.Fatalf("sh block %s failed: %v\n%s\n--- output ---\n%s", b.name, r.err, b.text, r.out)
			}
			if (strings.Contains(b.text, "lily demo") || strings.Contains(b.text, "lily-demo")) && !strings.Contains(string(r.out), "lost") {
				t.Errorf("sh block %s: the demo printed no ledger:\n%s", b.name, r.out)
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
func runBlock(block string, env []string, limit time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euxo", "pipefail", "-c", block)
	cmd.Env = env
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

// TestReadmeGoCompiles vets every Go program of the README and the
// documents under docs/ (a ```go block that starts with its package
// clause; the others are excerpts of them) against this module.
func TestReadmeGoCompiles(t *testing.T) {
	var blocks []docBlock
	for _, b := range docBlocks(t, "go") {
		if strings.HasPrefix(b.text, "package ") {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) < 3 {
		t.Fatalf("%d Go programs in README.md and docs/, want the consumer, the Lambda handler and the metrics example at least", len(blocks))
	}
	out, err := exec.Command("bash", "-c", `. scripts/raceflags && printf '%s\n' "${race_flags[@]}"`).Output()
	if err != nil {
		t.Fatalf("source scripts/raceflags: %v", err)
	}
	flags := strings.Fields(string(out))
	for _, db := range blocks {
		b := db.text
		dir, err := os.MkdirTemp(".", "readmecheck")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		// The test command's race flags: type-checked against the
		// packages the suite compiles anyway (see TestSoakTestsCompile).
		out, err := exec.Command("go", append(append([]string{"vet"}, flags...), "./"+filepath.Base(dir))...).CombinedOutput()
		if err != nil {
			t.Errorf("Go block %s does not compile: %v\n%s", db.name, err, out)
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

// TestDocLinks: every relative link of the README and of the documents
// under docs/ names a file that exists and, after '#', a heading of it
// (GitHub's anchors), so that moving a section cannot strand a reader.
func TestDocLinks(t *testing.T) {
	pages := append(docPages(t), filepath.Join("docs", "benchmarks.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, p := range pages {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := p
			if file != "" {
				dest = filepath.Join(filepath.Dir(p), file)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s links to %s: %v", p, target, err)
				continue
			}
			if anchor == "" {
				continue
			}
			if !slices.Contains(anchors(t, dest), anchor) {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", p, target, dest, anchor)
			}
		}
	}
}

// anchors returns the GitHub anchors of a Markdown file's headings: lower
// case, punctuation but '-' and '_' dropped, spaces turned into '-'.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inFence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
