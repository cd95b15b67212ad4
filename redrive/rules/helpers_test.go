package rules

import (
	"context"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/transport"
)

// The shared fixtures of the catalog's tests (internal/catalogtest), under
// the names these tests had in package catalog.
var (
	testNow = catalogtest.Now
	entry   = catalogtest.Entry
)

func eachStore(t *testing.T, fn func(t *testing.T, s *catalog.Store)) { catalogtest.EachStore(t, fn) }

// capture is a Publisher that confirms every publish and keeps the
// messages, as a broker would hold them.
type capture struct {
	mu   sync.Mutex
	msgs []transport.Message
}

func (c *capture) Publish(_ context.Context, p *transport.PublishParams) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, p.Messages...)
	return nil
}
