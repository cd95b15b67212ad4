package lily_test

import (
	"strings"
	"testing"
)

// Groups of packages the layering rules of docs/design.md §3.3 name.
var (
	catalogPackages = []string{
		"github.com/lily-mq/lily/catalog",
		"github.com/lily-mq/lily/ledger",
		"github.com/lily-mq/lily/redrive",
		"github.com/lily-mq/lily/internal/catalogdb",
	}
	transportImpls = []string{
		"github.com/lily-mq/lily/transport/sqlite",
		"github.com/lily-mq/lily/transport/rabbitmq",
		"github.com/lily-mq/lily/transport/kafka",
		"github.com/lily-mq/lily/transport/sqs",
		"github.com/lily-mq/lily/transport/pubsub",
		"github.com/lily-mq/lily/transport/nats",
		"github.com/lily-mq/lily/transport/azqueue",
		"github.com/lily-mq/lily/brokers",
	}
)

// forbidRuntime fails the test when pkg links the consumer runtime (the
// root package itself; forbid's prefixes would match every package).
func forbidRuntime(t *testing.T, pkg, why string) {
	t.Helper()
	for _, dep := range depsOf(t, pkg) {
		if dep == "github.com/lily-mq/lily" {
			t.Errorf("%s links the consumer runtime (the root package): %s", pkg, why)
		}
	}
}

// TestPureFoundations: retry, evidence and transport link nothing outside
// the standard library, and plan only retry: every other package builds
// on them.
func TestPureFoundations(t *testing.T) {
	allowed := map[string][]string{
		"./retry":     nil,
		"./evidence":  nil,
		"./transport": nil,
		"./plan":      {"github.com/lily-mq/lily/retry"},
	}
	for pkg, ok := range allowed {
		self := "github.com/lily-mq/lily/" + strings.TrimPrefix(pkg, "./")
		for _, dep := range depsOf(t, pkg) {
			first, _, _ := strings.Cut(dep, "/")
			if dep == self || !strings.Contains(first, ".") {
				continue // itself, or the standard library
			}
			found := false
			for _, a := range ok {
				found = found || dep == a
			}
			if !found {
				t.Errorf("%s links %s: it builds on the standard library alone", pkg, dep)
			}
		}
	}
}

// TestTransportsLinkNoCatalog: a broker transport moves messages and
// knows nothing of the runtime or the catalog; the wrapper that counts
// (ledger.Accounted) wraps it from outside.
func TestTransportsLinkNoCatalog(t *testing.T) {
	for _, pkg := range []string{"./transport/rabbitmq", "./transport/kafka", "./transport/sqs", "./transport/pubsub", "./transport/nats", "./transport/azqueue"} {
		forbid(t, pkg, "transports know nothing of the catalog (ledger.Accounted wraps them)", catalogPackages)
		forbidRuntime(t, pkg, "the runtime drives transports, never the other way")
	}
}

// TestCatalogLinksNoTransport: the catalog packages work on any transport
// through package transport's interfaces; none opens a broker.
func TestCatalogLinksNoTransport(t *testing.T) {
	for _, pkg := range []string{"./catalog", "./catalog/where", "./internal/catalogdb", "./ledger", "./presence", "./redrive", "./redrive/rules", "./ingest"} {
		forbid(t, pkg, "the catalog works through package transport's interfaces", transportImpls, brokerClients)
	}
	for _, pkg := range []string{"./catalog", "./catalog/where", "./internal/catalogdb", "./ledger", "./presence", "./redrive"} {
		forbidRuntime(t, pkg, "only redrive/rules' recorder is a lily.Hook")
	}
}

// TestToolsLinkNoBrokerSDK: the inbox and outbox live in the application's
// database, and the Prometheus hooks and the HTTP API are handed what they
// publish to: none of them links a broker client or cloud SDK.
func TestToolsLinkNoBrokerSDK(t *testing.T) {
	for _, pkg := range []string{"./inbox", "./outbox"} {
		forbid(t, pkg, "the inbox and outbox keep their state in the application's database", catalogPackages, brokerClients, transportImpls)
	}
	for _, pkg := range []string{"./lilyprom", "./httpapi"} {
		forbid(t, pkg, "publish targets are passed in; the broker factory is the brokers module's", brokerClients, transportImpls)
	}
}

// TestDrillLinksNoTransport: package drill runs on the transport and
// catalog its caller opens (the CLI wires them): it links no transport
// implementation and no broker SDK, so a drill runs on any transport.
func TestDrillLinksNoTransport(t *testing.T) {
	forbid(t, "./drill", "the drill's transport is passed in (drill.Env)", transportImpls, brokerClients)
}
