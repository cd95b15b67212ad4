package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lily-mq/lily"
)

// TestDeclaredTopicIsKnownAtOnce declares a queue whose topics do not
// exist yet and asks for their offsets and depth straight away. Declare's
// probe of the main topic, made before the topic existed, is cached by the
// client for MetadataMinAge; an admin request answered from that cache
// said UNKNOWN_TOPIC_OR_PARTITION for seconds after the topic was created
// (seen in CI as a failure of TestForeignRedriveReachesTheFailingGroupAlone).
func TestDeclaredTopicIsKnownAtOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	tr := open(t, c)
	qc := lily.QueueConfig{Name: fmt.Sprintf("fresh.%08x", rand.Uint32()), Transport: lily.TransportKafka}.WithDefaults()
	declare(t, tr, qc)
	if n := records(t, tr, qc.Name); n != 0 {
		t.Fatalf("new topic %s holds %d records, want 0", qc.Name, n)
	}
	if _, err := tr.InFlightParts(context.Background(), qc.Name); err != nil {
		t.Fatalf("in-flight count of a just-declared queue: %v", err)
	}
}
