package lily_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// heavyModules are what a SQLite or RabbitMQ consumer must not get with
// 'go get github.com/lily-mq/lily' (docs/design.md §3.1): the cloud SDKs,
// the emulators and the browser driver live in modules of their own.
var heavyModules = []string{
	"github.com/aws/",
	"cloud.google.com/",
	"google.golang.org/api",
	"github.com/Azure/",
	"github.com/Admiral-Piett/goaws",
	"github.com/twmb/franz-go/pkg/kfake",
	"github.com/chromedp/",
}

// goEnv runs the go command in dir outside the workspace (GOWORK=off), as a
// user's module that requires Lily does.
func goEnv(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// heavyIn returns the lines of a 'go mod graph' or 'go list -m all' output
// that name one of the heavy modules.
func heavyIn(out string) []string {
	var bad []string
	for line := range strings.SplitSeq(out, "\n") {
		for _, m := range heavyModules {
			if strings.Contains(line, m) {
				bad = append(bad, line)
				break
			}
		}
	}
	return bad
}

// TestRootModuleHasNoHeavyDependency: the root module's own graph (its
// tests included) has none of the heavy modules.
func TestRootModuleHasNoHeavyDependency(t *testing.T) {
	if bad := heavyIn(goEnv(t, ".", "list", "-m", "all")); len(bad) > 0 {
		t.Errorf("the root module's graph has heavy modules (move what needs them to its own module):\n%s", strings.Join(bad, "\n"))
	}
}

// TestMinimalConsumerModuleGraph builds what a user writes — a program
// consuming from the embedded SQLite store, in a module of its own that
// requires Lily — and checks its 'go mod graph' for the heavy modules.
func TestMinimalConsumerModuleGraph(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/consumer\n\ngo 1.26\n\nrequire github.com/lily-mq/lily v0.0.0-00010101000000-000000000000\n\nreplace github.com/lily-mq/lily => " + root + "\n"
	main := `package main

import (
	"context"
	"log"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport/sqlite"
)

func main() {
	ctx := context.Background()
	tr, err := sqlite.Open(ctx, "orders.db", sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	h := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error { return nil })
	c, err := lily.NewConsumer(tr, h, lily.ConsumerOptions{Queue: lily.QueueConfig{Name: "orders"}})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(c.Run(ctx))
}
`
	for name, text := range map[string]string{"go.mod": gomod, "main.go": main} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goEnv(t, dir, "mod", "tidy")
	goEnv(t, dir, "build", "-o", os.DevNull, ".")
	if bad := heavyIn(goEnv(t, dir, "mod", "graph")); len(bad) > 0 {
		t.Errorf("a minimal SQLite consumer's go mod graph has heavy modules:\n%s", strings.Join(bad, "\n"))
	}
}
