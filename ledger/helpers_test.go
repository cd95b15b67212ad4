package ledger

import (
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
)

// The shared fixtures of the catalog's tests (internal/catalogtest), under
// the names these tests had in package catalog.
var (
	testNow  = catalogtest.Now
	delivery = catalogtest.Delivery
	entry    = catalogtest.Entry
	seed     = catalogtest.Seed
)

func eachStore(t *testing.T, fn func(t *testing.T, s *catalog.Store)) { catalogtest.EachStore(t, fn) }
