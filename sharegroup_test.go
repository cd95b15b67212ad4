package lily_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
)

func TestShareGroupConfig(t *testing.T) {
	ok := lily.QueueConfig{Name: "emails", Transport: lily.TransportKafka, KafkaShareGroup: "senders"}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid share-group queue refused: %v", err)
	}
	if got := ok.Settings().DeliveryLimit; got != lily.ShareGroupDeliveryLimit || got >= lily.DefaultBrokerShareDeliveryLimit {
		t.Errorf("default delivery_limit on a share group = %d, want %d (below the broker's default %d)", got, lily.ShareGroupDeliveryLimit, lily.DefaultBrokerShareDeliveryLimit)
	}
	if got := ok.Spec().ShareGroup; got != "senders" {
		t.Errorf("Spec().ShareGroup = %q", got)
	}
	plain := lily.QueueConfig{Name: "emails", Transport: lily.TransportKafka}.WithDefaults()
	if got := plain.Settings().DeliveryLimit; got != lily.DefaultDeliveryLimit {
		t.Errorf("default delivery_limit without a share group = %d, want %d", got, lily.DefaultDeliveryLimit)
	}
	for _, tc := range []struct {
		name string
		q    lily.QueueConfig
		want []string
	}{
		{"not kafka", lily.QueueConfig{Name: "e", Transport: lily.TransportRabbitMQ, KafkaShareGroup: "g"},
			[]string{`kafka_share_group = "g"`, `transport is "rabbitmq"`, `set transport = "kafka"`}},
		{"park", lily.QueueConfig{Name: "e", Transport: lily.TransportKafka, KafkaShareGroup: "g", Ordering: lily.OrderingPark},
			[]string{`ordering = "park"`, "keeps no per-key order", "use a consumer group"}},
		{"block", lily.QueueConfig{Name: "e", Transport: lily.TransportKafka, KafkaShareGroup: "g", Ordering: lily.OrderingBlock},
			[]string{`ordering = "block"`, "remove kafka_share_group"}},
		{"bad name", lily.QueueConfig{Name: "e", Transport: lily.TransportKafka, KafkaShareGroup: "a b"},
			[]string{`kafka_share_group = "a b"`, "letters, digits"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.q.WithDefaults().Validate()
			if !errors.Is(err, lily.ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
