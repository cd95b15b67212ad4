package brokers

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
)

func parse(t *testing.T, toml string) config.Config {
	t.Helper()
	c, err := config.ParseConfig([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNewOverridesTheConfiguration: Options override rabbitmq_url and
// kafka_brokers; zero values keep them; nothing is dialled.
func TestNewOverridesTheConfiguration(t *testing.T) {
	c := parse(t, `
rabbitmq_url = "amqp://lily:secret@rabbit:5672/"
kafka_brokers = ["k1:9092"]
[[queue]]
name = "orders"
`)
	s := New(c, Options{})
	if s.url != c.RabbitMQURL || len(s.kafkaBrokers) != 1 || s.kafkaBrokers[0] != "k1:9092" {
		t.Errorf("defaults: url %q brokers %v", s.url, s.kafkaBrokers)
	}
	s = New(c, Options{RabbitMQURL: "amqp://other:5672/", KafkaBrokers: []string{"k2:9092", "k3:9092"}})
	if s.url != "amqp://other:5672/" || len(s.kafkaBrokers) != 2 {
		t.Errorf("overrides: url %q brokers %v", s.url, s.kafkaBrokers)
	}
	s.Close() // nothing opened: nothing to close
}

// TestSQLiteQueuesHaveNoBroker: a queue of the embedded store has no
// broker transport, no dead letters to peek, and is not among the sources.
func TestSQLiteQueuesHaveNoBroker(t *testing.T) {
	c := parse(t, "[[queue]]\nname = \"orders\"\n")
	s := New(c, Options{})
	defer s.Close()
	ctx := context.Background()
	q, _ := c.Queue("orders")
	if tr, err := s.ForQueue(ctx, q); tr != nil || err != nil {
		t.Errorf("ForQueue(sqlite queue) = %v, %v", tr, err)
	}
	if ds, err := s.PeekDeadLetters(ctx, q, 10); ds != nil || err != nil {
		t.Errorf("PeekDeadLetters(sqlite queue) = %v, %v", ds, err)
	}
	if srcs, err := s.Sources(ctx); len(srcs) != 0 || err != nil {
		t.Errorf("Sources = %v, %v", srcs, err)
	}
	for kind, want := range map[string]bool{lily.TransportRabbitMQ: true, lily.TransportKafka: true, lily.TransportSQS: true,
		lily.TransportPubSub: true, lily.TransportSQLite: false, "": false} {
		if IsBroker(kind) != want {
			t.Errorf("IsBroker(%q) = %v", kind, !want)
		}
	}
}

// TestSQSOptions: the region and credentials come from the configuration
// and the environment; what is missing is a *SettingsError naming the
// setting.
func TestSQSOptions(t *testing.T) {
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
	}
	var se *SettingsError
	if _, err := SQSOptions(config.Config{}); !errors.As(err, &se) || !strings.Contains(err.Error(), "sqs: no region: set sqs_region") {
		t.Errorf("no region: %v, want a *SettingsError", err)
	}
	if _, err := SQSOptions(config.Config{SQSRegion: "eu-west-1"}); !errors.As(err, &se) || !strings.Contains(err.Error(), "sqs: no credentials") {
		t.Errorf("no credentials: %v, want a *SettingsError", err)
	}
	// An emulator: region and credentials are placeholders.
	o, err := SQSOptions(config.Config{SQSEndpoint: "http://127.0.0.1:4100", SQSProtocol: "query"})
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := o.Config.Credentials.Retrieve(context.Background())
	if o.Config.Region != "us-east-1" || creds.AccessKeyID != "lily" || !o.QueryProtocol || o.VisibilityTimeout != config.DefaultSQSVisibilityTimeoutSeconds*1e9 {
		t.Errorf("emulator options: region %q key %q query %v visibility %s", o.Config.Region, creds.AccessKeyID, o.QueryProtocol, o.VisibilityTimeout)
	}
	t.Setenv("AWS_DEFAULT_REGION", "ap-south-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "token")
	o, err = SQSOptions(config.Config{})
	if err != nil {
		t.Fatal(err)
	}
	creds, _ = o.Config.Credentials.Retrieve(context.Background())
	if o.Config.Region != "ap-south-1" || creds.AccessKeyID != "AKID" || creds.SessionToken != "token" {
		t.Errorf("environment: region %q key %q token %q", o.Config.Region, creds.AccessKeyID, creds.SessionToken)
	}
	t.Setenv("AWS_REGION", "eu-central-1")
	if o, _ := SQSOptions(config.Config{}); o.Config.Region != "eu-central-1" {
		t.Errorf("AWS_REGION before AWS_DEFAULT_REGION: %q", o.Config.Region)
	}
	if o, _ := SQSOptions(config.Config{SQSRegion: "us-west-2"}); o.Config.Region != "us-west-2" {
		t.Errorf("sqs_region before the environment: %q", o.Config.Region)
	}
}

// TestConfigSQSRulesMatchTransport: config carries the SQS rules without
// the SDK (config/sqs.go); they refuse exactly what sqs.CheckSpec refuses,
// with its messages.
func TestConfigSQSRulesMatchTransport(t *testing.T) {
	long := strings.Repeat("q", 72)
	refused := 0
	for _, body := range []string{
		`name = "orders.created"`,
		`name = "pay.fifo"` + "\nretry_attempts = 0",
		`name = "pay.fifo"` + "\nretry_attempts = 2",
		`name = "slow"` + "\nretry_attempts = 1\nretry_backoff_millis = 900000\nmax_retry_backoff_millis = 900000",
		`name = "slower"` + "\nretry_attempts = 1\nretry_backoff_millis = 900001\nmax_retry_backoff_millis = 900001",
		`name = "` + strings.Repeat("q", 71) + `"`,
		`name = "` + long + `"`,
		`name = "` + long + `.fifo"` + "\nretry_attempts = 3",
		`name = "a.b.c_d-e"`,
	} {
		toml := "sqs_region = \"eu-west-1\"\n[[queue]]\ntransport = \"sqs\"\n" + body + "\n"
		_, cerr := config.ParseConfig([]byte(toml))
		// The queue as the transport sees it: the same entry on SQLite,
		// where the SQS rules do not apply.
		plain := parse(t, "[[queue]]\n"+body+"\n")
		spec := plain.Queues[0].Spec()
		serr := sqs.CheckSpec(spec)
		switch {
		case serr == nil && cerr != nil:
			t.Errorf("%s: config refuses what SQS accepts: %v", spec.Name, cerr)
		case serr != nil && cerr == nil:
			t.Errorf("%s: config accepts what SQS refuses: %v", spec.Name, serr)
		case serr != nil:
			refused++
			for _, e := range serr.(interface{ Unwrap() []error }).Unwrap() {
				if !strings.Contains(cerr.Error(), config.ErrInvalidConfig.Error()+": "+e.Error()) {
					t.Errorf("%s: config's error lacks the transport's %q:\n%v", spec.Name, e, cerr)
				}
			}
		}
	}
	if refused != 4 {
		t.Errorf("%d queues refused, want 4: the table no longer covers each rule", refused)
	}
}

// TestDLTRetentions: a kafka queue's dead-letter topic keeps records as
// long as the catalog keeps its entries unless kafka_dlt_retention_hours
// says otherwise; other queues have none.
func TestDLTRetentions(t *testing.T) {
	c := parse(t, `
kafka_brokers = ["127.0.0.1:9092"]
[kafka_dlt_retention_hours]
"b" = 24
[[queue]]
name = "a"
transport = "kafka"
dlq_retention_hours = 48
[[queue]]
name = "b"
transport = "kafka"
[[queue]]
name = "c"
`)
	r := DLTRetentions(c)
	if len(r) != 2 || r["a"].Millis != 48*3600*1000 || r["b"].Millis != 24*3600*1000 || r["a"].Bytes != -1 {
		t.Errorf("DLTRetentions = %+v", r)
	}
	if o := KafkaOptions(c); len(o.Brokers) != 1 || len(o.DeadLetterRetention) != 2 {
		t.Errorf("KafkaOptions = %+v", o)
	}
}

// counter is an in-flight and dead-letter counter with fixed answers.
type counter struct{ inFlight, dead int64 }

func (c counter) InFlight(context.Context, string) (int64, error)        { return c.inFlight, nil }
func (c counter) DeadLetterDepth(context.Context, string) (int64, error) { return c.dead, nil }

// TestCountersRouteByQueue: a configured broker queue is counted by its
// broker, any other by the default counter; without one, nothing.
func TestCountersRouteByQueue(t *testing.T) {
	ctx := context.Background()
	c := &Counters{def: counter{inFlight: 1}, byQueue: map[string]transport.InFlightCounter{"broker": counter{inFlight: 7, dead: 3}}}
	if n, _ := c.InFlight(ctx, "broker"); n != 7 {
		t.Errorf("broker queue in flight %d", n)
	}
	if n, _ := c.InFlight(ctx, "local"); n != 1 {
		t.Errorf("local queue in flight %d", n)
	}
	if n, _ := c.DeadLetterDepth(ctx, "broker"); n != 3 {
		t.Errorf("broker queue dead letters %d", n)
	}
	if p, _ := c.InFlightParts(ctx, "broker"); p.Other != 7 {
		t.Errorf("broker queue parts %+v", p)
	}
	none := &Counters{byQueue: map[string]transport.InFlightCounter{}}
	if n, err := none.InFlight(ctx, "x"); n != 0 || err != nil {
		t.Errorf("no counter: %d, %v", n, err)
	}
	if n, err := none.DeadLetterDepth(ctx, "x"); n != 0 || err != nil {
		t.Errorf("no counter: %d, %v", n, err)
	}
}
