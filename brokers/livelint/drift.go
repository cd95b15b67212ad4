package livelint

import (
	"fmt"
	"strings"

	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// argWhy says, per queue argument of Lily's topology (docs/design.md §6), what
// goes wrong when the live queue does not have it as planned.
var argWhy = map[string]string{
	"x-queue-type": "Lily's queues must be quorum queues: a classic queue keeps no delivery count (a crash-type poison " +
		"message loops forever), ignores x-delivery-limit and cannot dead-letter at-least-once",
	"x-delivery-limit": "the broker dead-letters a message after x-delivery-limit + 1 hand-overs (Lily declares " +
		"delivery_limit − 1); another value changes delivery_limit behind the configuration's back, and without one a " +
		"crash-type poison message loops",
	"x-dead-letter-exchange": "it is where the broker sends what it dead-letters (a main queue: messages at the delivery " +
		"limit; a bucket: retries whose delay ended, back to the main queue); without it, or with another, those " +
		"messages are dropped or go where Lily does not look",
	"x-dead-letter-routing-key": "dead letters carry this routing key; the dead-letter queue's binding (for a bucket, the " +
		"main queue's name on the default exchange) must match it, or RabbitMQ drops them silently",
	"x-dead-letter-strategy": "at-least-once makes the broker keep a message until the dead-letter target confirms it; " +
		"without it dead-lettering is at-most-once and a dead letter is lost if the target is unavailable",
	"x-overflow": "reject-publish makes a full queue refuse new messages (Lily then keeps the original); the default " +
		"drop-head silently drops the oldest messages and turns at-least-once dead-lettering into at-most-once",
	"x-message-ttl": "a bucket's TTL is its retry delay: another value changes the schedule, and the bucket name no longer " +
		"tells the truth",
	"x-max-length": "the cap bounds the queue on the broker's disk; with reject-publish a full queue refuses hand-offs " +
		"instead of dropping messages",
}

// diffKey returns the key under which a finding covers the difference d
// (see covered in CheckBroker): "argument|QUEUE|ARG", "exchange|NAME",
// "binding-from|EXCHANGE" or "queue|NAME".
func diffKey(top rabbitmq.Topology, d rabbitmq.Difference) string {
	switch d.Kind {
	case "argument":
		arg, _, _ := strings.Cut(d.Detail, " = ")
		return "argument|" + d.Name + "|" + arg
	case "binding":
		return "binding-from|" + bindingExchange(top, d)
	}
	return d.Kind + "|" + d.Name
}

// bindingExchange returns the exchange of a binding difference, by
// matching its detail against the planned bindings of its queue.
func bindingExchange(top rabbitmq.Topology, d rabbitmq.Difference) string {
	for _, b := range top.Bindings {
		if b.Queue == d.Name && d.Detail == fmt.Sprintf("from exchange %q with routing key %q", b.Exchange, b.RoutingKey) {
			return b.Exchange
		}
	}
	return ""
}

// drift turns a difference of 'lily topology verify' into a finding with
// the reason it matters.
func drift(top rabbitmq.Topology, d rabbitmq.Difference) lint.Finding {
	f := lint.Finding{Severity: lint.Error, Code: lint.CodeTopologyDrift, What: d.String()}
	role, source := "", ""
	for _, q := range top.Queues {
		if q.Name == d.Name {
			role, source = q.Role, q.Source
		}
	}
	switch d.Kind {
	case "exchange":
		role, source = exchangeRole(top, d.Name)
		f.Why = exchangeWhy(role, d.Problem)
	case "queue":
		f.Why = queueWhy(role, source)
	case "binding":
		f.Why = fmt.Sprintf("messages sent %s do not reach %s %s", strings.Replace(d.Detail, "from exchange", "to exchange", 1), roleName(role), d.Name)
		if role == "dlq" {
			f.Why += ": RabbitMQ drops those dead letters silently"
		}
	case "argument":
		arg, _, _ := strings.Cut(d.Detail, " = ")
		f.Why = argWhy[arg]
		switch {
		case arg == "x-message-ttl" && role != "retry":
			f.Why = "messages expire after the TTL unprocessed: with a dead-letter exchange they become dead letters " +
				"of reason expired, without one they are dropped"
		case f.Why == "":
			f.Why = "an argument Lily does not declare changes how the broker treats this queue: check that it cannot " +
				"drop, expire or reroute messages"
		}
	}
	f.Queue = source
	switch d.Problem {
	case "missing":
		f.Fix = "run 'lily topology apply --config FILE': it declares what is missing"
		if d.Kind == "argument" {
			f.Fix = "RabbitMQ cannot add arguments to an existing queue: move its messages away, delete it and run " +
				"'lily topology apply --config FILE', or set the value through a policy"
		}
	case "unexpected":
		f.Severity = lint.Warning
		f.Fix = "if it was not set on purpose, delete and re-declare the queue with 'lily topology apply --config FILE' " +
			"after moving its messages away"
	default:
		f.Fix = "RabbitMQ cannot change a queue's arguments in place: move its messages away, delete the queue and run " +
			"'lily topology apply --config FILE' (a policy can override some arguments meanwhile)"
		if d.Kind == "exchange" {
			f.Fix = "RabbitMQ cannot change an exchange's type in place: delete the exchange and run " +
				"'lily topology apply --config FILE' (bindings to it must be re-created too)"
		}
	}
	return f
}

// exchangeRole returns the role of the queues bound to exchange name
// ("main", "retry" or "dlq") and the Lily queue they serve, "" when
// several do.
func exchangeRole(top rabbitmq.Topology, name string) (role, source string) {
	sources := map[string]bool{}
	for _, b := range top.Bindings {
		if b.Exchange != name {
			continue
		}
		for _, q := range top.Queues {
			if q.Name == b.Queue {
				role = q.Role
				sources[q.Source] = true
			}
		}
	}
	if len(sources) == 1 {
		for s := range sources {
			source = s
		}
	}
	return role, source
}

// exchangeWhy explains a missing or inequivalent exchange by its role.
func exchangeWhy(role, problem string) string {
	if problem != "missing" {
		return "the exchange type decides routing: with another type, messages may reach none of Lily's queues"
	}
	switch role {
	case "dlq":
		return "this is a dead-letter exchange: RabbitMQ silently drops every dead letter sent to a missing one"
	case "retry":
		return "retry hand-offs to a missing exchange fail: Lily releases the delivery instead, spending the broker's " +
			"delivery limit rather than waiting in a bucket"
	}
	return "publishes to a missing exchange are unroutable: Lily's publisher sees them returned, other publishers lose them"
}

// queueWhy explains a missing queue by its role.
func queueWhy(role, source string) string {
	switch role {
	case "dlq":
		return "dead letters routed to the dead-letter exchange find no queue: RabbitMQ drops them silently"
	case "retry":
		return fmt.Sprintf("retry hand-offs to this bucket are unroutable: Lily releases the delivery instead, and %s's "+
			"messages are not retried with this delay", source)
	}
	return "there is no queue to consume from: messages published for it are unroutable and dropped or returned"
}
