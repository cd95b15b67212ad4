package evidence_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/fuzzval"
)

// The fuzz targets of the decoders of untrusted headers. Each input is
// read by fuzzval into a header map of typed values (the AMQP table types
// and more), with names biased towards the decoder's own headers. Run one
// with e.g.
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 2m ./evidence/
//
// Inputs that once found a bug are kept in testdata/fuzz/<target>/.

// lilyNames are the headers evidence.Decode reads.
var lilyNames = []string{
	evidence.HeaderReason, evidence.HeaderErrorType, evidence.HeaderErrorMessage, evidence.HeaderErrorStack,
	evidence.HeaderSource, evidence.HeaderSourcePartition, evidence.HeaderSourceOffset, evidence.HeaderSourceMessageID,
	evidence.HeaderDeliveryCount, evidence.HeaderFirstFailureAt, evidence.HeaderLastFailureAt, evidence.HeaderDeadLetteredAt,
	evidence.HeaderConsumer, evidence.HeaderConsumerVersion, evidence.HeaderHost, evidence.HeaderTraceparent,
	evidence.HeaderRawRetryCount, evidence.HeaderHoldKey, evidence.HeaderHoldMode, evidence.HeaderRetryCount, evidence.HeaderRedriveCount,
	evidence.HeaderSchemaVersion,
}

// seedValue encodes one value for fuzzval: kind byte, then its bytes.
func seedText(kind byte, s string) []byte { return append([]byte{kind, byte(len(s))}, s...) }

// seedHeaders builds a fuzzval input naming headers by their index in names.
func seedHeaders(names []string, vals ...[]byte) []byte {
	out := []byte{byte(len(vals))}
	for i, v := range vals {
		out = append(out, byte(i%len(names))*4+1)
		out = append(out, v...)
	}
	return out
}

// timesEqual compares the records' times with Equal and the rest with ==.
func sameRecord(a, b evidence.Record) bool {
	if !a.FirstFailureAt.Equal(b.FirstFailureAt) || !a.LastFailureAt.Equal(b.LastFailureAt) || !a.DeadLetteredAt.Equal(b.DeadLetteredAt) {
		return false
	}
	a.FirstFailureAt, a.LastFailureAt, a.DeadLetteredAt = time.Time{}, time.Time{}, time.Time{}
	b.FirstFailureAt, b.LastFailureAt, b.DeadLetteredAt = time.Time{}, time.Time{}, time.Time{}
	return a == b
}

// FuzzDecode: evidence.Decode never panics, keeps its fields in their
// documented ranges, and what it decoded survives Apply and Decode again
// unchanged (the evidence of a redriven or re-ingested message is stable).
func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add(seedHeaders(lilyNames,
		seedText(fuzzval.KindString, "permanent"), seedText(fuzzval.KindString, "*json.SyntaxError"),
		seedText(fuzzval.KindBytes, "boom"), seedText(fuzzval.KindString, "stack"), seedText(fuzzval.KindString, "sqlite/q"),
		[]byte{fuzzval.KindInt32, 0, 0, 0, 0, 0, 0, 0, 3}, seedText(fuzzval.KindString, "12345678901"),
		seedText(fuzzval.KindString, "17"), []byte{fuzzval.KindInt64, 0, 0, 0, 0, 0, 0, 0, 6},
		seedText(fuzzval.KindString, "2026-11-29T12:00:00.123Z"), seedText(fuzzval.KindBytes, "2026-11-29T15:00:00.123456+03:00"),
		[]byte{fuzzval.KindTime, 0, 0, 0, 0, 0x69, 0x2a, 0xc0, 0, 7}))
	f.Add(seedHeaders(lilyNames[16:], seedText(fuzzval.KindString, `"0" (string)`), seedText(fuzzval.KindString, "k"),
		seedText(fuzzval.KindString, "0"), []byte{fuzzval.KindFloat64, 0x40, 0x08, 0, 0, 0, 0, 0, 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := fuzzval.NewReader(data).Headers(lilyNames, 2)
		rec, err := evidence.Decode(h)
		if rec.RetryCount < 0 || rec.RetryCount > evidence.MaxRetryCount || rec.DeliveryCount < 0 || rec.RedriveCount < 0 ||
			rec.DeliveryCount > math.MaxInt32 || rec.RedriveCount > math.MaxInt32 {
			t.Fatalf("counts out of range: %+v", rec)
		}
		if (!rec.HasPartition && rec.SourcePartition != 0) || (!rec.HasOffset && rec.SourceOffset != 0) {
			t.Fatalf("partition/offset set without Has*: %+v", rec)
		}
		if err == nil && rec.Reason != "" && !rec.Reason.Valid() {
			t.Fatalf("unknown reason %q decoded without an error", rec.Reason)
		}
		if err != nil && !errors.Is(err, evidence.ErrInvalidHeader) && !errors.Is(err, evidence.ErrInvalidRetryCount) {
			t.Fatalf("error wraps neither sentinel: %v", err)
		}
		for _, tm := range []time.Time{rec.FirstFailureAt, rec.LastFailureAt, rec.DeadLetteredAt} {
			if !tm.IsZero() && tm.Location() != time.UTC {
				t.Fatalf("time %v not in UTC", tm)
			}
		}
		// Round trip: what Apply writes of the record decodes back to it
		// (times at Apply's millisecond precision).
		want := rec
		ms := func(t time.Time) time.Time {
			if t.IsZero() {
				return t
			}
			return t.Truncate(time.Millisecond)
		}
		want.FirstFailureAt, want.LastFailureAt, want.DeadLetteredAt = ms(want.FirstFailureAt), ms(want.LastFailureAt), ms(want.DeadLetteredAt)
		if want.RawRetryCount != "" {
			want.RetryCount = 0 // Apply leaves a non-canonical count as received
		}
		out := map[string]any{}
		want.Apply(out)
		back, err2 := evidence.Decode(out)
		if err2 != nil && want.Reason.Valid() {
			t.Fatalf("Decode of Apply's own headers: %v\nrecord %+v\nheaders %v", err2, want, out)
		}
		if !sameRecord(back, want) {
			t.Fatalf("round trip changed the record:\n got %+v\nwant %+v\nheaders %v", back, want, out)
		}
	})
}

// FuzzRetryCount: evidence.RetryCount never panics; it accepts exactly an
// int32 in 0..100 and returns it; everything else is 0 and a
// *RetryCountError naming the raw value, bounded by MaxRawBytes.
func FuzzRetryCount(f *testing.F) {
	for _, s := range [][]byte{
		{}, {1, fuzzval.KindInt32, 0, 0, 0, 0, 0, 0, 0, 3}, {1, fuzzval.KindInt32, 0, 0, 0, 0, 0, 0, 0, 101},
		{1, fuzzval.KindInt64, 0, 0, 0, 0, 0, 0, 0, 3}, append([]byte{1}, seedText(fuzzval.KindString, "0")...),
		{1, fuzzval.KindFloat64, 0x40, 0x08, 0, 0, 0, 0, 0, 0}, {1, fuzzval.KindInt8, 2}, {1, fuzzval.KindList, 1, fuzzval.KindInt32},
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := fuzzval.NewReader(data)
		h := map[string]any{}
		if r.Byte()&1 == 1 {
			h[evidence.HeaderRetryCount] = r.Value(2)
		}
		n, err := evidence.RetryCount(h)
		v, present := h[evidence.HeaderRetryCount]
		x, isInt32 := v.(int32)
		canonical := !present || (isInt32 && x >= 0 && x <= evidence.MaxRetryCount)
		switch {
		case canonical && err != nil:
			t.Fatalf("canonical %#v refused: %v", v, err)
		case canonical && present && n != int(x):
			t.Fatalf("RetryCount = %d for %#v", n, v)
		case !canonical && (err == nil || n != 0):
			t.Fatalf("non-canonical %#v accepted: %d, %v", v, n, err)
		}
		if err != nil {
			var rce *evidence.RetryCountError
			raw := evidence.FormatRaw(v)
			if !errors.As(err, &rce) || !errors.Is(err, evidence.ErrInvalidRetryCount) || len(raw) > evidence.MaxRawBytes {
				t.Fatalf("error %v for %#v: want a *RetryCountError, raw %d bytes", err, v, len(raw))
			}
			if !strings.Contains(err.Error(), strings.TrimSuffix(raw, ")")) {
				t.Fatalf("error %q does not name the raw value %q", err, raw)
			}
		}
		// What SetRetryCount writes is canonical and reads back.
		out := map[string]any{}
		evidence.SetRetryCount(out, n)
		if back, err := evidence.RetryCount(out); err != nil || back != n {
			t.Fatalf("SetRetryCount(%d) reads back as %d, %v", n, back, err)
		}
	})
}

// xdeathKeys are the fields of a RabbitMQ x-death entry.
var xdeathKeys = []string{"reason", "queue", "count", "time", "exchange", "routing-keys", "original-expiration"}

var rabbitNames = []string{
	"x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
	"x-last-death-reason", "x-last-death-queue", "x-last-death-exchange", "X-Death",
}

var brokerReasons = map[evidence.Reason]bool{evidence.ReasonRejected: true, evidence.ReasonExpired: true,
	evidence.ReasonMaxLen: true, evidence.ReasonDeliveryLimit: true}

// checkForeign checks the properties every foreign decoder shares.
func checkForeign(t *testing.T, h map[string]any) []evidence.ForeignEvidence {
	t.Helper()
	fs := evidence.DecodeForeign(h)
	if again := evidence.DecodeForeign(h); !reflect.DeepEqual(fs, again) {
		t.Fatalf("DecodeForeign is not deterministic:\n%+v\n%+v", fs, again)
	}
	systems := map[string]bool{evidence.SystemRabbitMQ: true, evidence.SystemMassTransit: true, evidence.SystemSpringKafka: true,
		evidence.SystemKafkaConnect: true, evidence.SystemKafkaStreams: true, evidence.SystemNServiceBus: true}
	for _, e := range fs {
		if !systems[e.System] || e.Origin == "" {
			t.Fatalf("unknown system or no origin: %+v", e)
		}
		if e.Count < 0 || e.Count > math.MaxInt32 {
			t.Fatalf("count %d out of range", e.Count)
		}
		if !e.Time.IsZero() && e.Time.Location() != time.UTC {
			t.Fatalf("time %v not in UTC", e.Time)
		}
		if (!e.HasPartition && e.Partition != 0) || (!e.HasOffset && e.Offset != 0) {
			t.Fatalf("partition/offset without Has*: %+v", e)
		}
		// Every recognised header is kept in Raw; only an empty x-death
		// table has none.
		if len(e.Raw) == 0 && e.System != evidence.SystemRabbitMQ {
			t.Fatalf("evidence without its raw headers: %+v", e)
		}
	}
	if r, ok := evidence.BrokerReason(h); ok != brokerReasons[r] {
		t.Fatalf("BrokerReason = %q, %v", r, ok)
	}
	return fs
}

// FuzzDecodeForeignRabbitMQ: the x-death decoder (a list of tables, the
// newest first) and x-first-death-* / x-last-death-*, and BrokerReason.
func FuzzDecodeForeignRabbitMQ(f *testing.F) {
	f.Add([]byte{})
	entry := append(append([]byte{4, 1}, seedText(fuzzval.KindString, "delivery_limit")...),
		append(append([]byte{5}, seedText(fuzzval.KindString, "orders.created")...),
			append([]byte{9, fuzzval.KindInt64, 0, 0, 0, 0, 0, 0, 0, 5}, 13, fuzzval.KindTime, 0, 0, 0, 0, 0x69, 0x2a, 0xc0, 0, 0)...)...)
	f.Add(append([]byte{2}, append(entry, entry...)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := fuzzval.NewReader(data)
		var list []any
		for range int(r.Byte() % 4) {
			if r.Byte()%8 == 0 {
				list = append(list, r.Value(2)) // not a table: skipped
				continue
			}
			list = append(list, r.Headers(xdeathKeys, 1))
		}
		h := r.Headers(rabbitNames, 2)
		ours := list != nil && r.Byte()%4 != 0
		if ours {
			h["x-death"] = list
		}
		fs := checkForeign(t, h)
		tables := 0
		for _, x := range list {
			if _, ok := x.(map[string]any); ok {
				tables++
			}
		}
		n := 0
		for _, e := range fs {
			if strings.HasPrefix(e.Origin, "x-death[") {
				n++
			}
		}
		if ours && n != tables {
			t.Fatalf("%d x-death evidence for %d tables", n, tables)
		}
	})
}

// foreignNames are the headers of the five other systems.
var foreignNames = [][]string{
	{"MT-Reason", "MT-Fault-ExceptionType", "MT-Fault-Message", "MT-Fault-StackTrace", "MT-Fault-Timestamp",
		"MT-Fault-RetryCount", "MT-Fault-InputAddress", "MT-Fault-ConsumerType", "MT-Host-MachineName"},
	{"kafka_dlt-original-topic", "kafka_dlt-original-partition", "kafka_dlt-original-offset", "kafka_dlt-original-timestamp",
		"kafka_dlt-exception-fqcn", "kafka_dlt-exception-message", "kafka_dlt-exception-stacktrace",
		"kafka_dlt-original-consumer-group", "kafka_dlt-key-exception-fqcn", "kafka_dlt-key-exception-message"},
	{"__connect.errors.stage", "__connect.errors.topic", "__connect.errors.partition", "__connect.errors.offset",
		"__connect.errors.exception.class.name", "__connect.errors.exception.message", "__connect.errors.connector.name"},
	{"__streams.errors.topic", "__streams.errors.partition", "__streams.errors.offset", "__streams.errors.exception",
		"__streams.errors.message", "__streams.errors.stacktrace"},
	{"NServiceBus.ExceptionInfo.ExceptionType", "NServiceBus.ExceptionInfo.Message", "NServiceBus.ExceptionInfo.StackTrace",
		"NServiceBus.FailedQ", "NServiceBus.TimeOfFailure", "NServiceBus.ProcessingEndpoint", "NServiceBus.ProcessingMachine"},
}

var foreignSystems = []string{evidence.SystemMassTransit, evidence.SystemSpringKafka, evidence.SystemKafkaConnect,
	evidence.SystemKafkaStreams, evidence.SystemNServiceBus}

// FuzzDecodeForeignSystems: the MassTransit, Spring Kafka (binary
// big-endian partition and offset), Kafka Connect, Kafka Streams and
// NServiceBus decoders. The first byte picks the system whose header names
// the input favours; a system whose headers are present is decoded.
func FuzzDecodeForeignSystems(f *testing.F) {
	for i, names := range foreignNames {
		f.Add(append([]byte{byte(i)}, seedHeaders(names, seedText(fuzzval.KindString, "x"), seedText(fuzzval.KindBytes, "\x00\x00\x00\x02"),
			seedText(fuzzval.KindBytes, "\x00\x00\x00\x00\x00\x00\x00\x07"), seedText(fuzzval.KindString, "2026-11-29 12:00:00:123456 Z"),
			seedText(fuzzval.KindString, "System.Exception"))...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := fuzzval.NewReader(data)
		sys := int(r.Byte()) % len(foreignNames)
		h := r.Headers(foreignNames[sys], 2)
		fs := checkForeign(t, h)
		present := false
		for k := range h {
			for _, n := range foreignNames[sys] {
				if strings.EqualFold(k, n) && n != "NServiceBus.ProcessingEndpoint" && n != "NServiceBus.ProcessingMachine" &&
					n != "MT-Host-MachineName" {
					present = true
				}
			}
		}
		found := false
		for _, e := range fs {
			found = found || e.System == foreignSystems[sys]
		}
		if present && !found {
			t.Fatalf("%s headers present, no %s evidence: %v", foreignSystems[sys], foreignSystems[sys], h)
		}
	})
}

// FuzzDecodeAttempts: evidence.DecodeAttempts never panics on any header
// value (the fuzzer's text as string or []byte, or a value of another
// type); a problem leaves an empty history and wraps ErrInvalidHeader,
// while the record's evidence beside it still decodes; what it returns is
// within the bounds and Apply writes it back unchanged.
func FuzzDecodeAttempts(f *testing.F) {
	f.Add(byte(0), []byte(`{"v":1,"attempts":[{"at":"2026-11-29T12:00:00.000Z","retry":0,"delivery":1,"type":"*errors.errorString","message":"boom","outcome":"retry"}]}`))
	f.Add(byte(1), []byte(`{"v":1,"dropped":989,"attempts":[{"at":"2026-11-29T15:00:00.5+03:00","retry":100,"outcome":"dead_letter","x":[1]}]}`))
	f.Add(byte(0), []byte(`{"v":2,"attempts":[]}`))
	f.Add(byte(0), []byte(`{"v":1,"attempts":[{"at":"9999-12-31T23:59:59.999-01:00","retry":0,"message":"\u0001\ud800"}]}`))
	f.Add(byte(2), []byte{fuzzval.KindList, 1, fuzzval.KindInt32, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		h := map[string]any{}
		switch kind % 3 {
		case 0:
			h[evidence.HeaderAttempts] = string(data)
		case 1:
			h[evidence.HeaderAttempts] = data
		default:
			h[evidence.HeaderAttempts] = fuzzval.NewReader(data).Value(2)
		}
		evidence.Record{Reason: evidence.ReasonPermanent, ErrorMessage: "boom"}.Apply(h)
		hist, err := evidence.DecodeAttempts(h)
		if err != nil && (!errors.Is(err, evidence.ErrInvalidHeader) || len(hist.Attempts) != 0 || hist.Dropped != 0) {
			t.Fatalf("a problem must leave an empty history and wrap ErrInvalidHeader: %+v, %v", hist, err)
		}
		if rec, rerr := evidence.Decode(h); rerr != nil || rec.Reason != evidence.ReasonPermanent || rec.ErrorMessage != "boom" {
			t.Fatalf("the attempt history disturbed the record: %+v, %v", rec, rerr)
		}
		if len(hist.Attempts) > 1+evidence.MaxRecentAttempts || hist.Dropped < 0 || (len(hist.Attempts) == 0 && hist.Dropped != 0) {
			t.Fatalf("out of bounds: %d attempts, %d dropped", len(hist.Attempts), hist.Dropped)
		}
		for _, a := range hist.Attempts {
			if len(a.ErrorMessage) > evidence.MaxAttemptMessageBytes || len(a.ErrorType) > evidence.MaxAttemptTypeBytes ||
				a.RetryCount < 0 || a.RetryCount > evidence.MaxRetryCount || a.DeliveryCount < 0 || a.At.Location() != time.UTC {
				t.Fatalf("attempt out of bounds: %+v", a)
			}
		}
		out := map[string]any{}
		hist.Apply(out)
		if s, _ := out[evidence.HeaderAttempts].(string); len(s) > evidence.MaxAttemptsBytes {
			t.Fatalf("Apply wrote %d bytes", len(s))
		}
		back, err := evidence.DecodeAttempts(out)
		if err != nil || !reflect.DeepEqual(back, hist) {
			t.Fatalf("round trip changed the history:\n got %+v, %v\nwant %+v\nheader %v", back, err, hist, out)
		}
	})
}
