package browsertest

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/httpapi"
	"github.com/lily-mq/lily/internal/consoletest"
)

// fixture is the console's server over a temporary SQLite catalog with
// dead letters of two queues, whose ledger balances (consoletest.Fixture).
type fixture struct {
	*consoletest.Fixture
	ts *httptest.Server
}

// The users who log in: a viewer, an operator, an admin, and an operator
// who may edit orders.created.
var (
	operatorToken = httpapi.Token{Name: "otto", Role: config.RoleOperator, Secret: "operator-secret-0123456789"}
	allTokens     = []httpapi.Token{{Name: "vera", Role: config.RoleViewer, Secret: "viewer-secret-0123456789"}, operatorToken,
		{Name: "ada", Role: config.RoleAdmin, Secret: "admin-secret-0123456789"}}
	editorToken = httpapi.Token{Name: "edith", Role: config.RoleOperator, Secret: "editor-secret-0123456789", EditQueues: []string{"orders.created"}}
)

// newFixture serves the console with tokens over a fixture on SQLite;
// tweak adjusts the server's options.
func newFixture(t *testing.T, tokens []httpapi.Token, tweak ...func(*httpapi.Options)) *fixture {
	t.Helper()
	cf := consoletest.New(t, "sqlite")
	o := httpapi.Options{Store: cf.Catalog, Config: cf.Config, Tokens: tokens, InFlight: cf.Transport,
		Logger: slog.New(slog.DiscardHandler), Target: cf.Target}
	for _, f := range tweak {
		f(&o)
	}
	srv, err := httpapi.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{Fixture: cf, ts: cf.Serve(srv)}
}

// jsonQueues declares orders.created as JSON.
func jsonQueues(o *httpapi.Options) { consoletest.JSONQueues(&o.Config) }
