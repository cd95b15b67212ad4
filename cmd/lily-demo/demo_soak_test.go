//go:build soak

package main

import (
	"path/filepath"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo/demotest"
)

// The demos on the in-process SQS and Pub/Sub run on every landing as
// docs/sqs.md and docs/pubsub.md write them (TestReadmeCommands, the
// lily-demo binary): the demo itself fails unless nothing is lost, every
// effect is applied once and the dead letters are exactly the workload's
// classes. These in-process runs add the exact figures (acked, redrive
// rounds, worker restarts) and run with -tags soak (scripts/soak).

// TestDemoSQS runs the demo on the in-process SQS emulator: the same
// counts as on SQLite, RabbitMQ and Kafka — the crashing orders counted by
// the emulator's receive count and dead-lettered at delivery_limit after
// exactly delivery_limit worker restarts each.
func TestDemoSQS(t *testing.T) {
	t.Parallel()
	demotest.RunBroker(t, lilyDemo, lily.TransportSQS, "--db", filepath.Join(t.TempDir(), "catalog.db"))
}

// TestDemoPubSub runs the demo on its in-process Pub/Sub fake: the same
// dead letters by reason and ledger as on SQLite (demotest.RunBroker
// checks them), each crash-type poison dead-lettered at delivery_limit by
// the subscription's delivery attempt; the restart count may be lower
// when both poisons shared a pulled batch (see demotest.RunBroker).
func TestDemoPubSub(t *testing.T) {
	t.Parallel()
	got := demotest.RunBroker(t, lilyDemo, lily.TransportPubSub, "--db", filepath.Join(t.TempDir(), "catalog.db"))
	if got.Transport != lily.TransportPubSub {
		t.Errorf("demo ran on %q", got.Transport)
	}
}
