package lily_test

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// depsOf returns the packages pkg links (go list -deps).
func depsOf(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// Packages that only the brokers module may link: the broker clients and
// cloud SDKs, and the transports and packages built on them.
var (
	brokerClients = []string{
		"github.com/rabbitmq/amqp091-go",
		"github.com/twmb/franz-go",
		"github.com/aws/",
		"cloud.google.com/",
		"google.golang.org/api",
		"github.com/Azure/",
		"github.com/nats-io/",
	}
	cloudSDKs = []string{
		"github.com/aws/",
		"cloud.google.com/",
		"google.golang.org/api",
		"github.com/Azure/",
	}
	brokerTransports = []string{
		"github.com/lily-mq/lily/transport/kafka",
		"github.com/lily-mq/lily/transport/sqs",
		"github.com/lily-mq/lily/transport/pubsub",
		"github.com/lily-mq/lily/transport/nats",
		"github.com/lily-mq/lily/transport/azqueue",
		"github.com/lily-mq/lily/transport/rabbitmq",
		"github.com/lily-mq/lily/brokers",
	}
)

// forbid fails the test for every package pkg links whose path starts
// with one of the prefixes (a prefix ending in a path element matches it
// and what is below it).
func forbid(t *testing.T, pkg string, why string, prefixes ...[]string) {
	t.Helper()
	for _, dep := range depsOf(t, pkg) {
		for _, ps := range prefixes {
			for _, p := range ps {
				if dep == p || strings.HasPrefix(dep, strings.TrimSuffix(p, "/")+"/") {
					t.Errorf("%s links %s: %s", pkg, dep, why)
				}
			}
		}
	}
}

// TestConfigLinksNoBroker: parsing a lily.toml links no broker client,
// cloud SDK or broker transport (config carries the rules it checks, such
// as SQS's queue names, itself).
func TestConfigLinksNoBroker(t *testing.T) {
	forbid(t, "./config", "the TOML parser must not pull in a broker SDK", brokerClients, brokerTransports)
}

// TestLintLinksNoBroker: lint's static checks need no broker client; the
// live checks that read brokers are brokers/livelint's.
func TestLintLinksNoBroker(t *testing.T) {
	forbid(t, "./lint", "the static checks read no broker (the live ones are in brokers/livelint)", brokerClients, brokerTransports)
}

// TestIngestLinksNoBrokerTransport: the ingest loop takes the dead-letter
// queues it drains as transport.DeadLetterDrainer; it opens none itself.
func TestIngestLinksNoBrokerTransport(t *testing.T) {
	forbid(t, "./ingest", "the ingest loop is transport-agnostic (lily serve hands it brokers.Set's sources)", cloudSDKs, []string{
		"github.com/lily-mq/lily/transport/kafka",
		"github.com/lily-mq/lily/transport/sqs",
		"github.com/lily-mq/lily/transport/pubsub",
		"github.com/lily-mq/lily/transport/nats",
		"github.com/lily-mq/lily/transport/azqueue",
		"github.com/lily-mq/lily/brokers",
		"github.com/twmb/franz-go",
		"github.com/nats-io/",
	})
}

// TestRootImportsNoFileFormatLibrary: the runtime package imports no TOML
// library (docs/design.md §3); the configuration file is package config's. Nor
// does it import the catalog or the packages layered on it: the catalog
// plugs into the runtime through interfaces (lily.KeyStore, lily.Hook).
func TestRootImportsNoFileFormatLibrary(t *testing.T) {
	for _, dep := range depsOf(t, ".") {
		if strings.Contains(strings.ToLower(dep), "toml") || strings.HasPrefix(dep, "github.com/lily-mq/lily/config") {
			t.Errorf("the root package depends on %s", dep)
		}
	}
	forbid(t, ".", "the catalog plugs into the runtime through interfaces (lily.KeyStore, lily.Hook), never the other way",
		[]string{"github.com/lily-mq/lily/catalog", "github.com/lily-mq/lily/ledger", "github.com/lily-mq/lily/redrive",
			"github.com/lily-mq/lily/internal/catalogdb"})
}

// TestSQLiteTransportIsLean: the embedded transport links neither the
// PostgreSQL driver (pgx) nor the consumer runtime (the root package): it
// shares the catalog's SQL layer (internal/catalogdb), not the catalog.
func TestSQLiteTransportIsLean(t *testing.T) {
	forbid(t, "./transport/sqlite", "the embedded transport shares the catalog's SQL layer (internal/catalogdb), not package catalog, which links pgx",
		[]string{"github.com/jackc/pgx"})
	for _, dep := range depsOf(t, "./transport/sqlite") {
		if dep == "github.com/lily-mq/lily" {
			t.Errorf("./transport/sqlite links the consumer runtime (the root package)")
		}
	}
}

// lilyBinary is the lily command users deploy, as 'go list' names it from
// the repository root.
const lilyBinary = "./cmd/lily"

// notInLilyBinary are the packages the lily binary must not link: the
// test machinery, and the in-process brokers, whose demos are
// cmd/lily-demo's (docs/design.md, the package map). A name ending in
// "/..." covers the packages below it. Lily's own test support — a
// package named *test, and fuzzval — is banned by testSupport.
var notInLilyBinary = []string{
	"testing",
	"testing/...",
	"net/http/httptest",
	"github.com/twmb/franz-go/pkg/kfake/...",
	"cloud.google.com/go/pubsub/v2/pstest/...",
	"github.com/Admiral-Piett/goaws/...",
	"github.com/nats-io/nats-server/...",
	"github.com/chromedp/...",
}

// testSupport reports whether dep is one of Lily's packages for tests:
// transporttest, sqstest, the internal *test helpers, fuzzval.
func testSupport(dep string) bool {
	own, ok := strings.CutPrefix(dep, "github.com/lily-mq/lily/")
	return ok && (strings.HasSuffix(path.Base(own), "test") || path.Base(own) == "fuzzval")
}

// TestLilyBinaryLinksNoTestMachinery: 'go list -deps ./cmd/lily' has none
// of notInLilyBinary; a failure names who imports each one.
func TestLilyBinaryLinksNoTestMachinery(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", lilyBinary).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", lilyBinary, err, out)
	}
	importers := map[string][]string{} // package → the packages of the binary importing it
	var deps []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps = append(deps, f[0])
		for _, imp := range f[1:] {
			importers[imp] = append(importers[imp], f[0])
		}
	}
	if len(deps) < 100 {
		t.Fatalf("go list -deps %s listed %d packages: not the lily binary?\n%s", lilyBinary, len(deps), out)
	}
	for _, dep := range deps {
		bad := testSupport(dep)
		for _, banned := range notInLilyBinary {
			tree, ok := strings.CutSuffix(banned, "/...")
			bad = bad || dep == banned || ok && (dep == tree || strings.HasPrefix(dep, tree+"/"))
		}
		if bad {
			t.Errorf("%s links %s (imported by %s)", lilyBinary, dep, strings.Join(importers[dep], ", "))
		}
	}
}
