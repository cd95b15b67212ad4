package livelint

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// A fresh RabbitMQ has the management plugin off, and 'lily lint --live'
// must not pass silently there. The one check that decides whether a
// crash-type poison message loops forever — queue-not-quorum — does not
// need the plugin: the queue's type is read through AMQP itself, as the
// consumer reads it (rabbitmq.Transport.QueueType: a declare with
// x-queue-type = quorum is a no-op on a quorum queue and refused on any
// other). Every other RabbitMQ check compares arguments, policies,
// exchanges and bindings that only the management API lists; without it
// they are not run, and one error finding (live-checks-not-run) names them
// and says that enabling the plugin runs them.

// RabbitMQOptions says how RabbitMQLive reads the broker.
type RabbitMQOptions struct {
	// URL is the broker's AMQP URL (rabbitmq.DefaultURL when empty):
	// queue-not-quorum runs through it when the management API cannot be
	// read.
	URL string
	// Management reads the management API. Nil (or an API that cannot be
	// read) runs the AMQP checks alone and reports the others as not run.
	Management *rabbitmq.Management
	// Logger receives the AMQP connection's events; nil discards them.
	Logger *slog.Logger
}

// dialTimeout bounds the AMQP connect of a live lint.
const dialTimeout = 10 * time.Second

// needsManagement are the RabbitMQ checks that read the management API.
var needsManagement = []string{lint.CodeTopologyDrift, lint.CodeDLXMissing, lint.CodeDLXUnbound,
	lint.CodeAtLeastOnceWithoutRejectPublish, lint.CodeDeliveryLimitWithoutDLX, lint.CodeNoDeliveryLimit,
	lint.CodeDLQMessageTTL, lint.CodeTTLWithoutDLX, lint.CodeDeliveryCountSemantics}

// RabbitMQLive judges the configuration's queues of transport "rabbitmq"
// on the live broker: through the management API (RabbitMQ) when it can
// be read; otherwise queue-not-quorum (and a missing main queue) through
// AMQP, plus a live-checks-not-run error naming the checks that need the
// API and why it could not be read. It returns an error only when neither
// the management API nor AMQP can be read.
func RabbitMQLive(ctx context.Context, cfg config.Config, o RabbitMQOptions) ([]lint.Finding, error) {
	if len(RabbitMQSpecs(cfg)) == 0 {
		return nil, nil
	}
	why := "no management API was given"
	if o.Management != nil {
		b, err := ReadBroker(ctx, cfg, o.Management)
		if err == nil {
			return CheckBroker(cfg, b), nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		why = err.Error()
	}
	fs, err := checkAMQP(ctx, cfg, o)
	if err != nil {
		return nil, fmt.Errorf("livelint: neither the management API (%s) nor AMQP could be read: %w", why, err)
	}
	return append(fs, lint.Finding{Severity: lint.Error, Code: lint.CodeLiveChecksNotRun,
		What: "the RabbitMQ management API could not be read (" + why + "): only queue-not-quorum ran, through AMQP; not run: " +
			strings.Join(needsManagement, ", "),
		Why: "these checks compare the queues' arguments and policies, the dead-letter exchanges and their bindings, which only " +
			"the management API lists; unchecked, a dead-letter route that drops messages silently (a missing or unbound " +
			"dead-letter exchange, a TTL on a dead-letter queue, no delivery limit) goes unreported",
		Fix: "enable the management plugin ('rabbitmq-plugins enable rabbitmq_management'), or give its URL with " +
			"--management-url, and run 'lily lint --live' again: it then runs every check"}), nil
}

// checkAMQP reads the type of every planned main queue through AMQP and
// returns queue-not-quorum for each that is not quorum, topology-drift
// for each that does not exist, and live-checks-not-run for each whose
// type could not be told.
func checkAMQP(ctx context.Context, cfg config.Config, o RabbitMQOptions) ([]lint.Finding, error) {
	specs := RabbitMQSpecs(cfg)
	top, err := rabbitmq.Plan(specs)
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	url := o.URL
	if url == "" {
		url = rabbitmq.DefaultURL
	}
	// One dial first: rabbitmq.Open retries until its context ends, and a
	// lint must fail at once on a broker it cannot reach.
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(dialTimeout)})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: connect: %w", err)
	}
	conn.Close()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url, Logger: log})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	tr.Register(specs...) // the probe declares a quorum queue's planned arguments: accepted at once
	var out []lint.Finding
	for _, pq := range top.Queues {
		if pq.Role != "main" {
			continue
		}
		typ, found, err := tr.QueueType(ctx, pq.Name)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, err
		case err != nil:
			out = append(out, lint.Finding{Severity: lint.Error, Queue: pq.Source, Code: lint.CodeLiveChecksNotRun,
				What: fmt.Sprintf("the type of main queue %s could not be read through AMQP: %v", pq.Name, err),
				Why:  "a main queue that is not quorum counts no deliveries, so a crash-type poison message loops forever; unchecked, it goes unreported",
				Fix:  "enable the management plugin ('rabbitmq-plugins enable rabbitmq_management'), which reads any queue's type, and run 'lily lint --live' again"})
		case !found:
			out = append(out, lint.Finding{Severity: lint.Error, Queue: pq.Source, Code: lint.CodeTopologyDrift,
				What: fmt.Sprintf("main queue %s does not exist (read through AMQP)", pq.Name),
				Why:  "messages published to the queue's exchange are routed nowhere, and a consumer of the queue fails to start",
				Fix:  "declare the topology with 'lily topology apply'"})
		case typ != "quorum":
			out = append(out, notQuorum(QueueState{Name: pq.Name, Role: pq.Role, Source: pq.Source, Exists: true, Type: typ}))
		}
	}
	return out, nil
}
