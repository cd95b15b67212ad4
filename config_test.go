package lily

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestQueueConfigWithDefaultsKeepsSetFields(t *testing.T) {
	in := QueueConfig{Name: "x", DeliveryLimit: new(-1), RetryJitterRatio: 0.3, MaxRedrives: new(7)}
	out := in.WithDefaults()
	if *out.DeliveryLimit != -1 {
		t.Errorf("DeliveryLimit -1 became %d: only an unset field means default", *out.DeliveryLimit)
	}
	if out.RetryJitterRatio != 0.3 || *out.MaxRedrives != 7 {
		t.Errorf("set fields changed: %+v", out)
	}
	if in.Transport != "" || in.RetryBackoffMillis != nil {
		t.Error("WithDefaults modified its receiver")
	}
	out2 := in.WithDefaults()
	*out2.DeliveryLimit = 9
	if *out.DeliveryLimit != -1 || *in.DeliveryLimit != -1 {
		t.Error("WithDefaults shares pointers between copies")
	}
}

// TestQueueConfigZeroIsAValue: a field set to 0 keeps its 0 through
// WithDefaults and Settings (cmp.Or used to turn it into the default).
func TestQueueConfigZeroIsAValue(t *testing.T) {
	q := QueueConfig{Name: "orders.created", MaxRedrives: new(0), ImmediateRetryMillis: new(int64(0))}.WithDefaults()
	s := q.Settings()
	if s.MaxRedrives != 0 || *q.MaxRedrives != 0 {
		t.Errorf("max_redrives 0 became %d", s.MaxRedrives)
	}
	if s.ImmediateRetryMillis != 0 {
		t.Errorf("immediate_retry_millis 0 became %d", s.ImmediateRetryMillis)
	}
	if err := q.Validate(); err != nil {
		t.Errorf("legal zeros refused: %v", err)
	}
}

// TestQueueConfigIllegalZerosRefused: each field whose 0 is out of range,
// set to 0, is refused with its name, the value and the range.
func TestQueueConfigIllegalZerosRefused(t *testing.T) {
	for _, tc := range []struct {
		field string
		set   func(*QueueConfig)
		rule  string
	}{
		{"delivery_limit", func(q *QueueConfig) { q.DeliveryLimit = new(0) }, "1..1000"},
		{"retry_backoff_millis", func(q *QueueConfig) { q.RetryBackoffMillis = new(int64(0)) }, "> 0"},
		{"max_retry_backoff_millis", func(q *QueueConfig) { q.MaxRetryBackoffMillis = new(int64(0)) }, ">= retry_backoff_millis"},
		{"handler_timeout_millis", func(q *QueueConfig) { q.HandlerTimeoutMillis = new(int64(0)) }, "> 0"},
		{"dlq_retention_hours", func(q *QueueConfig) { q.DLQRetentionHours = new(0) }, "> 0"},
		{"bucket_max_length", func(q *QueueConfig) { q.BucketMaxLength = new(int64(0)) }, ">= 1"},
		{"dlq_max_length", func(q *QueueConfig) { q.DLQMaxLength = new(int64(0)) }, ">= 1"},
		{"breaker_failure_ratio", func(q *QueueConfig) { q.BreakerFailureRatio = new(0.0) }, "(0, 1]"},
		{"breaker_min_requests", func(q *QueueConfig) { q.BreakerMinRequests = new(0) }, ">= 1"},
		{"breaker_window_millis", func(q *QueueConfig) { q.BreakerWindowMillis = new(int64(0)) }, "> 0"},
		{"breaker_cooldown_millis", func(q *QueueConfig) { q.BreakerCooldownMillis = new(int64(0)) }, "> 0"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			q := QueueConfig{Name: "orders.created"}
			tc.set(&q)
			err := q.WithDefaults().Validate()
			if err == nil {
				t.Fatalf("%s = 0 accepted", tc.field)
			}
			msg := err.Error()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(msg, tc.field) || !strings.Contains(msg, "0") || !strings.Contains(msg, tc.rule) {
				t.Errorf("error %q lacks the field %s, the value 0 or the range %q", msg, tc.field, tc.rule)
			}
		})
	}
}

// TestQueueSettingsResolvesUnset: Settings is safe without WithDefaults
// and gives the defaults; after WithDefaults every pointer is set to them.
func TestQueueSettingsResolvesUnset(t *testing.T) {
	var q QueueConfig
	s := q.Settings()
	want := QueueSettings{
		RetryBackoffMillis: 1000, MaxRetryBackoffMillis: 60000, DeliveryLimit: DefaultDeliveryLimit,
		ImmediateRetryMillis: DefaultImmediateRetryMillis, HandlerTimeoutMillis: DefaultHandlerTimeoutMillis,
		MaxRedrives: DefaultMaxRedrives, DLQRetentionHours: DefaultDLQRetentionHours,
		BucketMaxLength: DefaultBucketMaxLength, DLQMaxLength: DefaultDLQMaxLength,
		BreakerFailureRatio: DefaultBreakerFailureRatio, BreakerMinRequests: DefaultBreakerMinRequests,
		BreakerWindowMillis: DefaultBreakerWindowMillis, BreakerCooldownMillis: DefaultBreakerCooldownMillis,
	}
	if s != want {
		t.Errorf("Settings of the zero QueueConfig:\n got %+v\nwant %+v", s, want)
	}
	d := q.WithDefaults()
	v := reflect.ValueOf(d)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && f.IsNil() && v.Type().Field(i).Name != "Breaker" {
			t.Errorf("WithDefaults left %s nil", v.Type().Field(i).Name)
		}
	}
	if d.Settings() != want {
		t.Errorf("Settings after WithDefaults = %+v", d.Settings())
	}
	if (QueueConfig{RetryBackoffMillis: new(int64(120000))}).Settings().MaxRetryBackoffMillis != 120000 {
		t.Error("the default max backoff is below a larger base")
	}
	if err := (QueueConfig{Name: "q", ExpectedRatePerSecond: math.NaN()}).Validate(); err == nil || !strings.Contains(err.Error(), "expected_rate_per_second") {
		t.Errorf("expected_rate_per_second NaN: %v", err)
	}
}

func TestValidateSingleFields(t *testing.T) {
	base := QueueConfig{Name: "q"}.WithDefaults()
	tests := []struct {
		name   string
		mutate func(*QueueConfig)
		want   string // "" = valid
	}{
		{"defaults", func(*QueueConfig) {}, ""},
		{"delivery limit 1", func(q *QueueConfig) { q.DeliveryLimit = new(1) }, ""},
		{"delivery limit 1000", func(q *QueueConfig) { q.DeliveryLimit = new(1000) }, ""},
		{"delivery limit 1001", func(q *QueueConfig) { q.DeliveryLimit = new(1001) }, "delivery_limit = 1001"},
		{"jitter 0.5", func(q *QueueConfig) { q.RetryJitterRatio = 0.5 }, ""},
		{"jitter negative", func(q *QueueConfig) { q.RetryJitterRatio = -0.1 }, "retry_jitter_ratio -0.1"},
		{"attempts 100", func(q *QueueConfig) { q.RetryAttempts = 100 }, ""},
		{"attempts -1", func(q *QueueConfig) { q.RetryAttempts = -1 }, "retry_attempts -1"},
		{"backoff negative", func(q *QueueConfig) { q.RetryBackoffMillis = new(int64(-1)) }, "retry_backoff_millis -1"},
		{"max equal base", func(q *QueueConfig) { q.MaxRetryBackoffMillis = new(*q.RetryBackoffMillis) }, ""},
		{"immediate millis", func(q *QueueConfig) { q.ImmediateRetryMillis = new(int64(10001)) }, "immediate_retry_millis = 10001"},
		{"name empty", func(q *QueueConfig) { q.Name = "" }, `name = ""`},
		{"name leading dot", func(q *QueueConfig) { q.Name = ".orders" }, `name = ".orders"`},
		{"name 200 chars", func(q *QueueConfig) { q.Name = strings.Repeat("a", 200) }, ""},
		{"name 201 chars", func(q *QueueConfig) { q.Name = strings.Repeat("a", 201) }, "name ="},
		{"transport rabbitmq", func(q *QueueConfig) { q.Transport = TransportRabbitMQ }, ""},
		{"bucket max length 1", func(q *QueueConfig) { q.BucketMaxLength = new(int64(1)) }, ""},
		{"bucket max length negative", func(q *QueueConfig) { q.BucketMaxLength = new(int64(-1)) }, "bucket_max_length = -1"},
		{"dlq max length negative", func(q *QueueConfig) { q.DLQMaxLength = new(int64(-1)) }, "dlq_max_length = -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := base
			tt.mutate(&q)
			err := q.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %+v", q)
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an ErrInvalidConfig naming %q", err, tt.want)
			}
		})
	}
}
