package sqlite_test

import (
	"testing"

	"github.com/lily-mq/lily/transport/transporttest"
)

// TestOperatorPaths runs the operator paths (redrive, redirect, sample,
// rate, cancel, a runner that dies mid-job) on the embedded store. Its
// catalog is the SQLite file the transport dead-letters into, in the
// dead-lettering's own transaction, so it runs on that store alone; a
// queue has no other readers (no fan-out) and no DLQ that can fill or
// refuse a size, so those scenarios are not registered.
func TestOperatorPaths(t *testing.T) {
	transporttest.OperatorPaths(t, transporttest.OperatorHarness{
		Name: "sqlite",
		Open: openWithCatalog,
	})
}
