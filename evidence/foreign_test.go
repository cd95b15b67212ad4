package evidence

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"
)

// amqpTable mimics amqp091-go's named Table type.
type amqpTable map[string]any

func be32(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
func be64(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

func TestDecodeForeignRabbitMQ(t *testing.T) {
	deadAt := time.Date(2026, 11, 8, 2, 1, 29, 0, time.UTC)
	h := map[string]any{
		"x-death": []any{
			amqpTable{
				"count":        int64(1),
				"reason":       "delivery_limit",
				"queue":        "billing.order-placed",
				"time":         deadAt,
				"exchange":     "",
				"routing-keys": []any{"billing.order-placed"},
			},
			map[string]any{
				"count":        int64(3),
				"reason":       []byte("expired"),
				"queue":        []byte("billing.order-placed.retry.v2.1000ms"),
				"time":         int64(1762567200), // epoch seconds
				"exchange":     "billing.retry.v2",
				"routing-keys": []string{"billing.order-placed.1000ms"},
			},
			"not a table",
		},
		"x-first-death-reason":   []byte("expired"),
		"x-first-death-queue":    "billing.order-placed.retry.v2.1000ms",
		"x-first-death-exchange": "billing.retry.v2",
		"x-last-death-reason":    "delivery_limit",
		"x-last-death-queue":     "billing.order-placed",
		"x-last-death-exchange":  "",
		"content-type":           "application/json",
	}
	got := DecodeForeign(h)
	want := []ForeignEvidence{
		{
			System: SystemRabbitMQ, Origin: "x-death[0]", Reason: "delivery_limit",
			Source: "billing.order-placed", Time: deadAt, Count: 1,
			Raw: map[string]string{
				"count": "1", "reason": "delivery_limit", "queue": "billing.order-placed",
				"time": "2026-11-08T02:01:29Z", "exchange": "", "routing-keys": "billing.order-placed",
			},
		},
		{
			System: SystemRabbitMQ, Origin: "x-death[1]", Reason: "expired",
			Source: "billing.order-placed.retry.v2.1000ms", Time: time.Unix(1762567200, 0).UTC(), Count: 3,
			Raw: map[string]string{
				"count": "3", "reason": "expired", "queue": "billing.order-placed.retry.v2.1000ms",
				"time": "1762567200", "exchange": "billing.retry.v2", "routing-keys": "billing.order-placed.1000ms",
			},
		},
		{
			System: SystemRabbitMQ, Origin: "x-last-death-*", Reason: "delivery_limit", Source: "billing.order-placed",
			Raw: map[string]string{
				"x-last-death-reason": "delivery_limit", "x-last-death-queue": "billing.order-placed", "x-last-death-exchange": "",
			},
		},
		{
			System: SystemRabbitMQ, Origin: "x-first-death-*", Reason: "expired", Source: "billing.order-placed.retry.v2.1000ms",
			Raw: map[string]string{
				"x-first-death-reason": "expired", "x-first-death-queue": "billing.order-placed.retry.v2.1000ms",
				"x-first-death-exchange": "billing.retry.v2",
			},
		},
	}
	assertForeign(t, got, want)
}

func TestDecodeForeignMassTransit(t *testing.T) {
	h := map[string]any{
		"MT-Fault-ConsumerType":      "Bookstore.Billing.OrderPlacedConsumer",
		"MT-Fault-ExceptionType":     "System.InvalidOperationException",
		"MT-Fault-InputAddress":      "rabbitmq://localhost:17301/billing-order-placed",
		"MT-Fault-Message":           []byte("Unsupported currency XXX"),
		"MT-Fault-MessageType":       "Bookstore.Contracts.OrderPlaced",
		"MT-Fault-StackTrace":        "   at Bookstore.Billing.PaymentGateway.ChargeAsync(OrderPlaced order, CancellationToken cancellationToken)",
		"MT-Fault-Timestamp":         "2026-11-08T02:01:29.5773530Z",
		"MT-Fault-RetryCount":        int32(2),
		"MT-Host-MassTransitVersion": "8.5.12.0",
		"MT-Reason":                  "fault",
		"x-first-death-reason":       nil, // absent-ish: value nil
	}
	got := DecodeForeign(h)
	mt := find(t, got, SystemMassTransit)
	want := ForeignEvidence{
		System: SystemMassTransit, Origin: "MT-Fault-*", Reason: "fault",
		Source:        "rabbitmq://localhost:17301/billing-order-placed",
		ExceptionType: "System.InvalidOperationException",
		Message:       "Unsupported currency XXX",
		Stack:         "at Bookstore.Billing.PaymentGateway.ChargeAsync(OrderPlaced order, CancellationToken cancellationToken)",
		Consumer:      "Bookstore.Billing.OrderPlacedConsumer",
		Time:          time.Date(2026, 11, 8, 2, 1, 29, 577353000, time.UTC),
		Count:         2,
		Raw: map[string]string{
			"MT-Fault-ConsumerType":      "Bookstore.Billing.OrderPlacedConsumer",
			"MT-Fault-ExceptionType":     "System.InvalidOperationException",
			"MT-Fault-InputAddress":      "rabbitmq://localhost:17301/billing-order-placed",
			"MT-Fault-Message":           "Unsupported currency XXX",
			"MT-Fault-MessageType":       "Bookstore.Contracts.OrderPlaced",
			"MT-Fault-StackTrace":        "   at Bookstore.Billing.PaymentGateway.ChargeAsync(OrderPlaced order, CancellationToken cancellationToken)",
			"MT-Fault-Timestamp":         "2026-11-08T02:01:29.5773530Z",
			"MT-Fault-RetryCount":        "2",
			"MT-Host-MassTransitVersion": "8.5.12.0",
			"MT-Reason":                  "fault",
		},
	}
	assertForeign(t, []ForeignEvidence{mt}, []ForeignEvidence{want})

	// MT-Host-* alone (no fault) is not fault evidence.
	if got := DecodeForeign(map[string]any{"MT-Host-MachineName": "web-1"}); got != nil {
		t.Errorf("MT-Host only: %+v", got)
	}
}

func TestDecodeForeignSpringKafka(t *testing.T) {
	ts := time.Date(2026, 11, 8, 2, 1, 29, 577e6, time.UTC)
	h := map[string]any{
		"kafka_dlt-exception-fqcn":          []byte("org.springframework.kafka.listener.ListenerExecutionFailedException"),
		"kafka_dlt-exception-cause-fqcn":    []byte("java.lang.IllegalStateException"),
		"kafka_dlt-exception-message":       []byte("Listener failed; Unsupported currency XXX"),
		"kafka_dlt-exception-stacktrace":    []byte("org.springframework.kafka.listener.ListenerExecutionFailedException: Listener failed\n\tat ..."),
		"kafka_dlt-original-topic":          []byte("orders"),
		"kafka_dlt-original-partition":      be32(7),
		"kafka_dlt-original-offset":         be64(1234567890123),
		"kafka_dlt-original-timestamp":      be64(ts.UnixMilli()),
		"kafka_dlt-original-timestamp-type": []byte("CreateTime"),
		"kafka_dlt-original-consumer-group": []byte("billing"),
		"__TypeId__":                        []byte("com.example.OrderPlaced"),
	}
	got := DecodeForeign(h)
	want := ForeignEvidence{
		System: SystemSpringKafka, Origin: "kafka_dlt-*",
		Source: "orders", Partition: 7, HasPartition: true, Offset: 1234567890123, HasOffset: true,
		ExceptionType: "org.springframework.kafka.listener.ListenerExecutionFailedException",
		Message:       "Listener failed; Unsupported currency XXX",
		Stack:         "org.springframework.kafka.listener.ListenerExecutionFailedException: Listener failed\n\tat ...",
		Consumer:      "billing",
		Raw: map[string]string{
			"kafka_dlt-exception-fqcn":          "org.springframework.kafka.listener.ListenerExecutionFailedException",
			"kafka_dlt-exception-cause-fqcn":    "java.lang.IllegalStateException",
			"kafka_dlt-exception-message":       "Listener failed; Unsupported currency XXX",
			"kafka_dlt-exception-stacktrace":    "org.springframework.kafka.listener.ListenerExecutionFailedException: Listener failed\n\tat ...",
			"kafka_dlt-original-topic":          "orders",
			"kafka_dlt-original-partition":      "7",
			"kafka_dlt-original-offset":         "1234567890123",
			"kafka_dlt-original-timestamp":      "2026-11-08T02:01:29.577Z",
			"kafka_dlt-original-timestamp-type": "CreateTime",
			"kafka_dlt-original-consumer-group": "billing",
		},
	}
	assertForeign(t, got, []ForeignEvidence{want})

	// Key deserialization failures; partition and offset as decimal text.
	h2 := map[string]any{
		"kafka_dlt-key-exception-fqcn":    []byte("org.apache.kafka.common.errors.SerializationException"),
		"kafka_dlt-key-exception-message": []byte("bad key"),
		"kafka_dlt-original-partition":    "12",
		"kafka_dlt-original-offset":       []byte("42"),
	}
	e := find(t, DecodeForeign(h2), SystemSpringKafka)
	if e.ExceptionType != "org.apache.kafka.common.errors.SerializationException" || e.Message != "bad key" {
		t.Errorf("key exception: %+v", e)
	}
	if !e.HasPartition || e.Partition != 12 || !e.HasOffset || e.Offset != 42 {
		t.Errorf("decimal partition/offset: %+v", e)
	}
}

func TestDecodeForeignKafkaConnect(t *testing.T) {
	h := map[string]any{
		"__connect.errors.topic":                []byte("orders"),
		"__connect.errors.partition":            []byte("1"),
		"__connect.errors.offset":               []byte("10"),
		"__connect.errors.connector.name":       []byte("jdbc-sink"),
		"__connect.errors.task.id":              []byte("2"),
		"__connect.errors.stage":                []byte("VALUE_CONVERTER"),
		"__connect.errors.class.name":           []byte("org.apache.kafka.connect.json.JsonConverter"),
		"__connect.errors.exception.class.name": []byte("org.apache.kafka.connect.errors.DataException"),
		"__connect.errors.exception.message":    []byte("Converting byte[] to Kafka Connect data failed due to serialization error"),
		"__connect.errors.exception.stacktrace": []byte("org.apache.kafka.connect.errors.DataException: Converting...\n\tat org.apache.kafka.connect.json.JsonConverter.toConnectData(JsonConverter.java:324)"),
	}
	want := ForeignEvidence{
		System: SystemKafkaConnect, Origin: "__connect.errors.*", Reason: "VALUE_CONVERTER",
		Source: "orders", Partition: 1, HasPartition: true, Offset: 10, HasOffset: true,
		ExceptionType: "org.apache.kafka.connect.errors.DataException",
		Message:       "Converting byte[] to Kafka Connect data failed due to serialization error",
		Stack:         "org.apache.kafka.connect.errors.DataException: Converting...\n\tat org.apache.kafka.connect.json.JsonConverter.toConnectData(JsonConverter.java:324)",
		Consumer:      "jdbc-sink",
		Raw:           map[string]string{},
	}
	for k, v := range h {
		want.Raw[k] = string(v.([]byte))
	}
	assertForeign(t, DecodeForeign(h), []ForeignEvidence{want})
}

func TestDecodeForeignKafkaStreams(t *testing.T) {
	h := map[string]any{
		"__streams.errors.exception":  []byte("org.apache.kafka.common.errors.SerializationException"),
		"__streams.errors.message":    []byte("Size of data received by IntegerDeserializer is not 4"),
		"__streams.errors.stacktrace": []byte("org.apache.kafka.common.errors.SerializationException: Size of data...\n\tat ..."),
		"__streams.errors.topic":      []byte("payments"),
		"__streams.errors.partition":  []byte("0"),
		"__streams.errors.offset":     []byte("99"),
	}
	want := ForeignEvidence{
		System: SystemKafkaStreams, Origin: "__streams.errors.*",
		Source: "payments", Partition: 0, HasPartition: true, Offset: 99, HasOffset: true,
		ExceptionType: "org.apache.kafka.common.errors.SerializationException",
		Message:       "Size of data received by IntegerDeserializer is not 4",
		Stack:         "org.apache.kafka.common.errors.SerializationException: Size of data...\n\tat ...",
		Raw:           map[string]string{},
	}
	for k, v := range h {
		want.Raw[k] = string(v.([]byte))
	}
	assertForeign(t, DecodeForeign(h), []ForeignEvidence{want})
}

func TestDecodeForeignNServiceBus(t *testing.T) {
	h := map[string]any{
		"NServiceBus.ExceptionInfo.ExceptionType":      "System.InvalidOperationException",
		"NServiceBus.ExceptionInfo.InnerExceptionType": "System.FormatException",
		"NServiceBus.ExceptionInfo.HelpLink":           "",
		"NServiceBus.ExceptionInfo.Message":            "Unsupported currency XXX",
		"NServiceBus.ExceptionInfo.Source":             "Billing",
		"NServiceBus.ExceptionInfo.StackTrace":         "System.InvalidOperationException: Unsupported currency XXX\r\n   at Billing.Handler.Handle()",
		"NServiceBus.ExceptionInfo.Data.Message type":  "Contracts.OrderPlaced",
		"NServiceBus.FailedQ":                          []byte("Billing"),
		"NServiceBus.TimeOfFailure":                    "2026-11-08 02:01:29:577353 Z",
		"NServiceBus.ProcessingEndpoint":               "Billing",
		"NServiceBus.ProcessingMachine":                "BILLING-01",
		"NServiceBus.MessageId":                        "6c0a0000-0000-0000-43d4-08df3d3c3457",
	}
	want := ForeignEvidence{
		System: SystemNServiceBus, Origin: "NServiceBus.ExceptionInfo.*",
		Source:        "Billing",
		ExceptionType: "System.InvalidOperationException",
		Message:       "Unsupported currency XXX",
		Stack:         "System.InvalidOperationException: Unsupported currency XXX\r\n   at Billing.Handler.Handle()",
		Consumer:      "Billing",
		Time:          time.Date(2026, 11, 8, 2, 1, 29, 577353000, time.UTC),
		Raw: map[string]string{
			"NServiceBus.ExceptionInfo.ExceptionType":      "System.InvalidOperationException",
			"NServiceBus.ExceptionInfo.InnerExceptionType": "System.FormatException",
			"NServiceBus.ExceptionInfo.HelpLink":           "",
			"NServiceBus.ExceptionInfo.Message":            "Unsupported currency XXX",
			"NServiceBus.ExceptionInfo.Source":             "Billing",
			"NServiceBus.ExceptionInfo.StackTrace":         "System.InvalidOperationException: Unsupported currency XXX\r\n   at Billing.Handler.Handle()",
			"NServiceBus.ExceptionInfo.Data.Message type":  "Contracts.OrderPlaced",
			"NServiceBus.FailedQ":                          "Billing",
			"NServiceBus.TimeOfFailure":                    "2026-11-08 02:01:29:577353 Z",
			"NServiceBus.ProcessingEndpoint":               "Billing",
			"NServiceBus.ProcessingMachine":                "BILLING-01",
		},
	}
	assertForeign(t, DecodeForeign(h), []ForeignEvidence{want})

	if got := nsbTime("2026-11-08T02:01:29Z"); !got.Equal(time.Date(2026, 11, 8, 2, 1, 29, 0, time.UTC)) {
		t.Errorf("RFC 3339 fallback: %v", got)
	}
	if got := nsbTime("garbage"); !got.IsZero() {
		t.Errorf("garbage: %v", got)
	}
}

func TestDecodeForeignCaseInsensitiveAndMixed(t *testing.T) {
	h := map[string]any{
		"mt-fault-message":         "lower-cased by a proxy",
		"Kafka_DLT-Original-Topic": "orders",
		"x-death":                  []any{map[string]any{"reason": "rejected", "queue": "q"}},
	}
	got := DecodeForeign(h)
	var systems []string
	for _, e := range got {
		systems = append(systems, e.System)
	}
	if want := []string{SystemRabbitMQ, SystemMassTransit, SystemSpringKafka}; !reflect.DeepEqual(systems, want) {
		t.Fatalf("systems = %v, want %v", systems, want)
	}
	if got[1].Message != "lower-cased by a proxy" || got[2].Source != "orders" {
		t.Errorf("case-insensitive lookup: %+v", got)
	}
}

func TestDecodeForeignNone(t *testing.T) {
	for _, h := range []map[string]any{nil, {}, {"content-type": "x", HeaderReason: "permanent"}, {"x-death": "garbage"}} {
		if got := DecodeForeign(h); got != nil {
			t.Errorf("DecodeForeign(%v) = %+v", h, got)
		}
	}
}

func TestBrokerReason(t *testing.T) {
	tests := []struct {
		name string
		h    map[string]any
		want Reason
		ok   bool
	}{
		{"none", map[string]any{}, "", false},
		{"x-death newest first", map[string]any{
			"x-death": []any{
				amqpTable{"reason": "delivery_limit", "queue": "orders.created"},
				amqpTable{"reason": "expired", "queue": "orders.created.retry.v2.1000ms"},
			},
			"x-first-death-reason": "expired",
		}, ReasonDeliveryLimit, true},
		{"rejected as bytes", map[string]any{"x-death": []any{map[string]any{"reason": []byte("rejected")}}}, ReasonRejected, true},
		{"maxlen", map[string]any{"x-death": []any{map[string]any{"reason": "maxlen"}}}, ReasonMaxLen, true},
		{"last death beats first death", map[string]any{"x-first-death-reason": "expired", "x-last-death-reason": "rejected"}, ReasonRejected, true},
		{"first death only", map[string]any{"x-first-death-reason": []byte("expired")}, ReasonExpired, true},
		{"unknown reason", map[string]any{"x-first-death-reason": "nacked"}, "", false},
		{"empty x-death falls back", map[string]any{"x-death": []any{}, "x-first-death-reason": "maxlen"}, ReasonMaxLen, true},
	}
	for _, tt := range tests {
		got, ok := BrokerReason(tt.h)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: BrokerReason = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func find(t *testing.T, all []ForeignEvidence, system string) ForeignEvidence {
	t.Helper()
	for _, e := range all {
		if e.System == system {
			return e
		}
	}
	t.Fatalf("no %s evidence in %+v", system, all)
	return ForeignEvidence{}
}

func assertForeign(t *testing.T, got, want []ForeignEvidence) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d evidence entries, want %d:\n%+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !reflect.DeepEqual(g.Raw, w.Raw) {
			t.Errorf("[%d] Raw:\n got %q\nwant %q", i, g.Raw, w.Raw)
		}
		g.Raw, w.Raw = nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Errorf("[%d]:\n got %+v\nwant %+v", i, g, w)
		}
	}
}
