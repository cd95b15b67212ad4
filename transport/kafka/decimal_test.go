package kafka_test

import (
	"reflect"
	"testing"

	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

// TestHeadersKeepDecimals: an AMQP decimal (a message redriven from
// RabbitMQ to Kafka, or headers copied between them) comes back as a
// transport.Decimal, nested ones too.
func TestHeadersKeepDecimals(t *testing.T) {
	h := transport.Headers{"price": transport.Decimal{Scale: 2, Value: 1234},
		"nested": map[string]any{"d": transport.Decimal{Scale: 1, Value: -5}}}
	rh, err := kafka.EncodeHeaders(h)
	if err != nil {
		t.Fatal(err)
	}
	if got := kafka.DecodeHeaders(rh); !reflect.DeepEqual(got, h) {
		t.Errorf("decoded %#v, want %#v", got, h)
	}
}
