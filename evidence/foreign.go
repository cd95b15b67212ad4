package evidence

import (
	"encoding/binary"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Systems whose dead-letter evidence DecodeForeign recognises.
const (
	// SystemRabbitMQ: x-death, x-first-death-*, x-last-death-*.
	SystemRabbitMQ = "rabbitmq"
	// SystemMassTransit: MT-Fault-*, MT-Reason (and MT-Host-* kept in Raw).
	SystemMassTransit = "masstransit"
	// SystemSpringKafka: kafka_dlt-* of Spring Kafka's DeadLetterPublishingRecoverer.
	SystemSpringKafka = "spring-kafka"
	// SystemKafkaConnect: __connect.errors.* of a Kafka Connect dead letter queue.
	SystemKafkaConnect = "kafka-connect"
	// SystemKafkaStreams: __streams.errors.* of a Kafka Streams dead letter queue.
	SystemKafkaStreams = "kafka-streams"
	// SystemNServiceBus: NServiceBus.ExceptionInfo.*, NServiceBus.FailedQ,
	// NServiceBus.TimeOfFailure.
	SystemNServiceBus = "nservicebus"
)

// ForeignEvidence is dead-letter evidence written by another system, decoded for triage.
// Fields a system does not record are zero; every recognised header is also kept as text
// in Raw.
type ForeignEvidence struct {
	// System is one of the System constants.
	System string
	// Origin names the header or entry the evidence came from, e.g. "x-death[0]",
	// "x-first-death-*", "MT-Fault-*".
	Origin string
	// Reason is the system's own reason: RabbitMQ's rejected, expired, maxlen or
	// delivery_limit; MassTransit's MT-Reason; Kafka Connect's failing stage.
	Reason string
	// Source is where the message failed: queue, topic or input address.
	Source string
	// Partition is the source partition; meaningful only when HasPartition.
	Partition int32
	// HasPartition reports whether Partition is known.
	HasPartition bool
	// Offset is the source offset; meaningful only when HasOffset.
	Offset int64
	// HasOffset reports whether Offset is known.
	HasOffset bool
	// ExceptionType is the exception class or type name.
	ExceptionType string
	// Message is the exception message.
	Message string
	// Stack is the stack trace.
	Stack string
	// Consumer identifies the failing code: consumer type, consumer group, connector
	// or endpoint.
	Consumer string
	// Time is when the failure or dead-lettering happened, when recorded (UTC).
	Time time.Time
	// Count is the system's count: x-death count, MT-Fault-RetryCount.
	Count int
	// Raw holds every recognised header (or x-death entry field) as text, by its
	// original name. Binary integers are shown in decimal, binary timestamps in RFC 3339.
	Raw map[string]string
}

// DecodeForeign returns the foreign dead-letter evidence found in h, in a fixed order:
// RabbitMQ (x-death entries newest first, then x-last-death-*, then x-first-death-*),
// MassTransit, Spring Kafka, Kafka Connect, Kafka Streams, NServiceBus, Google Pub/Sub, NATS JetStream, Azure Functions, Lambda destinations. It returns nil
// when there is none.
//
// Values may be string or []byte; integers any integer type or decimal text (Spring
// Kafka's partition and offset are 4- and 8-byte big-endian integers); x-death may be any
// list of string-keyed tables, including an AMQP client's named Table type. Header names
// match exactly or, failing that, case-insensitively. DecodeForeign never fails: a value
// it cannot interpret is left out of the typed fields and kept in Raw.
func DecodeForeign(h map[string]any) []ForeignEvidence {
	v := newView(h)
	var out []ForeignEvidence
	out = append(out, decodeRabbit(v)...)
	for _, dec := range []func(*view) (ForeignEvidence, bool){
		decodeMassTransit, decodeSpring, decodeConnect, decodeStreams, decodeNServiceBus, decodePubSub, decodeJetStream, decodeAzureFunctions, decodeLambda,
	} {
		if e, ok := dec(v); ok {
			out = append(out, e)
		}
	}
	return out
}

// BrokerReason maps the latest RabbitMQ dead-lettering reason in h to a Lily Reason:
// rejected → ReasonRejected, expired → ReasonExpired, maxlen → ReasonMaxLen,
// delivery_limit → ReasonDeliveryLimit. The latest reason is that of x-death's first
// entry (newest first), else x-last-death-reason, else x-first-death-reason. Note that
// x-first-death-reason of a message that went through Lily's retry buckets is usually
// "expired" (the bucket's TTL), which is why it is consulted last. It returns false
// when there is no reason or it is not one of the four. A message forwarded
// by Google Pub/Sub's dead-letter policy (CloudPubSubDeadLetterSource*
// attributes, or x-lily-pubsub-forwarded-by) gives ReasonDeliveryLimit; a
// JetStream advisory (x-lily-jetstream-advisory) delivery_limit for
// MaxDeliver, rejected for a terminated message; an Azure Functions poison
// message (x-lily-azure-functions-queue) delivery_limit; a Lambda
// on-failure record (x-lily-lambda-condition) delivery_limit for
// RetriesExhausted, expired for EventAgeExceeded.
func BrokerReason(h map[string]any) (Reason, bool) {
	v := newView(h)
	var reason string
	if list, ok := asList(v.value("x-death")); ok && len(list) > 0 {
		if t, ok := asTable(list[0]); ok {
			reason, _ = textOf(t["reason"])
		}
	}
	if reason == "" {
		reason = v.text("x-last-death-reason")
	}
	if reason == "" {
		reason = v.text("x-first-death-reason")
	}
	switch strings.TrimSpace(reason) {
	case "rejected":
		return ReasonRejected, true
	case "expired":
		return ReasonExpired, true
	case "maxlen":
		return ReasonMaxLen, true
	case "delivery_limit":
		return ReasonDeliveryLimit, true
	}
	if r, ok := pubsubReason(v); ok {
		return r, true
	}
	if v.text(HeaderAzureFunctionsQueue) != "" {
		// Moved after maxDequeueCount dequeues: the delivery limit.
		return ReasonDeliveryLimit, true
	}
	if r, ok := lambdaReason(v); ok {
		return r, true
	}
	return jetstreamReason(v)
}

// view looks headers up by exact name, then case-insensitively.
type view struct {
	h     map[string]any
	keys  []string          // sorted
	lower map[string]string // lower-case name → first actual name
}

func newView(h map[string]any) *view {
	v := &view{h: h, keys: sortedKeys(h), lower: make(map[string]string, len(h))}
	for _, k := range v.keys {
		l := strings.ToLower(k)
		if _, dup := v.lower[l]; !dup {
			v.lower[l] = k
		}
	}
	return v
}

func (v *view) lookup(name string) (any, string, bool) {
	if x, ok := v.h[name]; ok {
		return x, name, true
	}
	if k, ok := v.lower[strings.ToLower(name)]; ok {
		return v.h[k], k, true
	}
	return nil, "", false
}

func (v *view) value(name string) any {
	x, _, _ := v.lookup(name)
	return x
}

func (v *view) text(name string) string {
	x, _, ok := v.lookup(name)
	if !ok {
		return ""
	}
	return strings.TrimSpace(render(x))
}

// raw collects, as text, the headers whose names start with one of the prefixes
// (case-insensitively). A prefix may be a full header name.
func (v *view) raw(prefixes ...string) map[string]string {
	var m map[string]string
	for _, k := range v.keys {
		l := strings.ToLower(k)
		for _, p := range prefixes {
			if strings.HasPrefix(l, strings.ToLower(p)) {
				if m == nil {
					m = make(map[string]string)
				}
				m[k] = render(v.h[k])
				break
			}
		}
	}
	return m
}

func (e *ForeignEvidence) setPartition(x any, ok bool) {
	if !ok {
		return
	}
	if n, ok := intOf(x); ok && n >= math.MinInt32 && n <= math.MaxInt32 {
		e.Partition, e.HasPartition = int32(n), true
	}
}

func (e *ForeignEvidence) setOffset(x any, ok bool) {
	if !ok {
		return
	}
	if n, ok := intOf(x); ok {
		e.Offset, e.HasOffset = n, true
	}
}

// decodeRabbit reads x-death (one evidence per entry), x-last-death-* and x-first-death-*.
func decodeRabbit(v *view) []ForeignEvidence {
	var out []ForeignEvidence
	if list, ok := asList(v.value("x-death")); ok {
		for i, item := range list {
			t, ok := asTable(item)
			if !ok {
				continue
			}
			e := ForeignEvidence{System: SystemRabbitMQ, Origin: "x-death[" + itoa(i) + "]", Raw: map[string]string{}}
			for _, k := range sortedKeys(t) {
				e.Raw[k] = render(t[k])
			}
			e.Reason = strings.TrimSpace(render(t["reason"]))
			e.Source = strings.TrimSpace(render(t["queue"]))
			if n, ok := intOf(t["count"]); ok && n >= 0 && n <= math.MaxInt32 {
				e.Count = int(n)
			}
			e.Time = rabbitTime(t["time"])
			out = append(out, e)
		}
	}
	for _, which := range []string{"x-last-death-", "x-first-death-"} {
		raw := v.raw(which)
		if raw == nil {
			continue
		}
		out = append(out, ForeignEvidence{
			System: SystemRabbitMQ,
			Origin: which + "*",
			Reason: v.text(which + "reason"),
			Source: v.text(which + "queue"),
			Raw:    raw,
		})
	}
	return out
}

// rabbitTime reads an x-death time: an AMQP timestamp (time.Time in Go clients), epoch
// seconds, or RFC 3339 text.
func rabbitTime(x any) time.Time {
	if t, ok := timeOf(x); ok {
		return t
	}
	if n, ok := intOf(x); ok && n > 0 {
		if t := time.Unix(n, 0).UTC(); rfc3339Year(t) {
			return t
		}
	}
	return time.Time{}
}

func decodeMassTransit(v *view) (ForeignEvidence, bool) {
	if v.raw("MT-Fault-", "MT-Reason") == nil {
		return ForeignEvidence{}, false
	}
	raw := v.raw("MT-Fault-", "MT-Reason", "MT-Host-")
	e := ForeignEvidence{
		System:        SystemMassTransit,
		Origin:        "MT-Fault-*",
		Reason:        v.text("MT-Reason"),
		Source:        v.text("MT-Fault-InputAddress"),
		ExceptionType: v.text("MT-Fault-ExceptionType"),
		Message:       v.text("MT-Fault-Message"),
		Stack:         v.text("MT-Fault-StackTrace"),
		Consumer:      v.text("MT-Fault-ConsumerType"),
		Raw:           raw,
	}
	if t, ok := timeOf(v.value("MT-Fault-Timestamp")); ok {
		e.Time = t
	}
	if n, ok := intOf(v.value("MT-Fault-RetryCount")); ok && n >= 0 && n <= math.MaxInt32 {
		e.Count = int(n)
	}
	return e, true
}

// springInt reads a Spring Kafka integer header: a big-endian binary integer of size
// bytes (how Spring writes it), else decimal text or any integer type.
func springInt(x any, size int) (int64, bool) {
	if b, ok := x.([]byte); ok && len(b) == size {
		if size == 4 {
			return int64(int32(binary.BigEndian.Uint32(b))), true
		}
		return int64(binary.BigEndian.Uint64(b)), true
	}
	return intOf(x)
}

func decodeSpring(v *view) (ForeignEvidence, bool) {
	raw := v.raw("kafka_dlt-")
	if raw == nil {
		return ForeignEvidence{}, false
	}
	e := ForeignEvidence{
		System:        SystemSpringKafka,
		Origin:        "kafka_dlt-*",
		Source:        v.text("kafka_dlt-original-topic"),
		ExceptionType: v.text("kafka_dlt-exception-fqcn"),
		Message:       v.text("kafka_dlt-exception-message"),
		Stack:         v.text("kafka_dlt-exception-stacktrace"),
		Consumer:      v.text("kafka_dlt-original-consumer-group"),
		Raw:           raw,
	}
	// A failure to deserialize the key is reported in the key-exception headers.
	if e.ExceptionType == "" && e.Message == "" && e.Stack == "" {
		e.ExceptionType = v.text("kafka_dlt-key-exception-fqcn")
		e.Message = v.text("kafka_dlt-key-exception-message")
		e.Stack = v.text("kafka_dlt-key-exception-stacktrace")
	}
	if x, k, ok := v.lookup("kafka_dlt-original-partition"); ok {
		if n, ok := springInt(x, 4); ok && n >= math.MinInt32 && n <= math.MaxInt32 {
			e.Partition, e.HasPartition = int32(n), true
			raw[k] = itoa64(n)
		}
	}
	if x, k, ok := v.lookup("kafka_dlt-original-offset"); ok {
		if n, ok := springInt(x, 8); ok {
			e.Offset, e.HasOffset = n, true
			raw[k] = itoa64(n)
		}
	}
	// The original record's timestamp (epoch milliseconds) is when it was produced, not
	// when it failed; it is shown in Raw only.
	if x, k, ok := v.lookup("kafka_dlt-original-timestamp"); ok {
		if n, ok := springInt(x, 8); ok {
			raw[k] = time.UnixMilli(n).UTC().Format(TimeLayout)
		}
	}
	return e, true
}

func decodeConnect(v *view) (ForeignEvidence, bool) {
	raw := v.raw("__connect.errors.")
	if raw == nil {
		return ForeignEvidence{}, false
	}
	e := ForeignEvidence{
		System:        SystemKafkaConnect,
		Origin:        "__connect.errors.*",
		Reason:        v.text("__connect.errors.stage"),
		Source:        v.text("__connect.errors.topic"),
		ExceptionType: v.text("__connect.errors.exception.class.name"),
		Message:       v.text("__connect.errors.exception.message"),
		Stack:         v.text("__connect.errors.exception.stacktrace"),
		Consumer:      v.text("__connect.errors.connector.name"),
		Raw:           raw,
	}
	e.setPartition(lookup2(v, "__connect.errors.partition"))
	e.setOffset(lookup2(v, "__connect.errors.offset"))
	return e, true
}

func decodeStreams(v *view) (ForeignEvidence, bool) {
	raw := v.raw("__streams.errors.")
	if raw == nil {
		return ForeignEvidence{}, false
	}
	e := ForeignEvidence{
		System:        SystemKafkaStreams,
		Origin:        "__streams.errors.*",
		Source:        v.text("__streams.errors.topic"),
		ExceptionType: v.text("__streams.errors.exception"),
		Message:       v.text("__streams.errors.message"),
		Stack:         v.text("__streams.errors.stacktrace"),
		Raw:           raw,
	}
	e.setPartition(lookup2(v, "__streams.errors.partition"))
	e.setOffset(lookup2(v, "__streams.errors.offset"))
	return e, true
}

func lookup2(v *view, name string) (any, bool) {
	x, _, ok := v.lookup(name)
	return x, ok
}

func decodeNServiceBus(v *view) (ForeignEvidence, bool) {
	raw := v.raw("NServiceBus.ExceptionInfo.", "NServiceBus.FailedQ", "NServiceBus.TimeOfFailure")
	if raw == nil {
		return ForeignEvidence{}, false
	}
	for k, s := range v.raw("NServiceBus.ProcessingEndpoint", "NServiceBus.ProcessingMachine") {
		raw[k] = s
	}
	e := ForeignEvidence{
		System:        SystemNServiceBus,
		Origin:        "NServiceBus.ExceptionInfo.*",
		Source:        v.text("NServiceBus.FailedQ"),
		ExceptionType: v.text("NServiceBus.ExceptionInfo.ExceptionType"),
		Message:       v.text("NServiceBus.ExceptionInfo.Message"),
		Stack:         v.text("NServiceBus.ExceptionInfo.StackTrace"),
		Consumer:      v.text("NServiceBus.ProcessingEndpoint"),
		Raw:           raw,
	}
	e.Time = nsbTime(v.value("NServiceBus.TimeOfFailure"))
	return e, true
}

// nsbWire matches NServiceBus's wire time format "yyyy-MM-dd HH:mm:ss:ffffff Z".
var nsbWire = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}):(\d{1,9}) Z$`)

// nsbTime reads NServiceBus.TimeOfFailure: the wire format, else RFC 3339.
func nsbTime(x any) time.Time {
	s, ok := textOf(x)
	if !ok {
		t, _ := timeOf(x)
		return t
	}
	s = strings.TrimSpace(s)
	if m := nsbWire.FindStringSubmatch(s); m != nil {
		s = m[1] + "T" + m[2] + "." + m[3] + "Z"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

func itoa(i int) string { return strconv.Itoa(i) }

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
