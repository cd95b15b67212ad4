package kafka_test

import (
	"context"
	"testing"

	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

// Declare gives a new dead-letter topic the planned retention and sets it
// on one that exists with another (as an older Lily left it: retention.ms
// -1); Verify is clean afterwards; the rest of an existing topic is left
// alone.
func TestDeclareDeadLetterRetention(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	if err := c.CreateTopic("old.orders.dlt", 3, map[string]string{"retention.ms": "-1", "max.message.bytes": "2097152"}); err != nil {
		t.Fatal(err)
	}
	r := kafka.DLTRetention{Millis: 2 * 3600 * 1000, Bytes: 64 << 20}
	withRetention := func(o *kafka.Options) { o.DeadLetterRetention = map[string]kafka.DLTRetention{"old.orders": r} }
	tr := open(t, c, withRetention)
	specs := []transport.QueueSpec{{Name: "old.orders"}, {Name: "new.orders"}}
	diffs, err := tr.Verify(ctx, specs, 3)
	if err != nil {
		t.Fatal(err)
	}
	var dltDiffs int
	for _, d := range diffs {
		if d.Topic == "old.orders.dlt" && d.Kind == "config" {
			dltDiffs++
		}
	}
	if dltDiffs != 3 {
		t.Errorf("before: %d config differences of old.orders.dlt, want 3 (retention.ms, retention.bytes, segment.ms): %v", dltDiffs, diffs)
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: specs}); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]map[string]string{
		"old.orders.dlt": {"retention.ms": "7200000", "retention.bytes": "67108864", "segment.ms": "3600000", "max.message.bytes": "2097152"},
		"new.orders.dlt": {"retention.ms": "1209600000", "retention.bytes": "-1", "segment.ms": "3600000"}, // the default: 336h
	} {
		got, err := tr.TopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", topic, k, got[k], v)
			}
		}
	}
	// A new client, as 'lily topology verify' is (the first one's
	// metadata cache still remembers the topics as missing for a while).
	if diffs, err := open(t, c, withRetention).Verify(ctx, specs, 3); err != nil || len(diffs) != 0 {
		t.Errorf("after Declare: %v, %v", diffs, err)
	}
	if _, err := tr.TopicConfigs(ctx, "no.such.topic"); err == nil {
		t.Error("TopicConfigs of a missing topic: no error")
	}
}
