package livelint

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// QueueState is one planned queue as the broker has it.
type QueueState struct {
	// Name is the broker queue, e.g. "orders.created.dlq.v2".
	Name string
	// Role is "main", "retry" or "dlq" (rabbitmq.Queue.Role).
	Role string
	// Source is the Lily queue it serves.
	Source string
	// Exists is false when the broker has no such queue.
	Exists bool
	// Type is the broker's queue type: "quorum", "classic", "stream".
	Type string
	// Arguments are the queue's x-arguments as the management API
	// returns them (numbers as float64).
	Arguments map[string]any
	// Policy names the policies applied to the queue, if any.
	Policy string
	// PolicyDefinition is the effective policy definition (keys without
	// the "x-" prefix, e.g. "message-ttl").
	PolicyDefinition map[string]any
}

// minWins are the settings where RabbitMQ applies the smaller of the
// argument and the policy value; for the others the argument wins.
var minWins = map[string]bool{"x-message-ttl": true, "x-delivery-limit": true, "x-max-length": true, "x-max-length-bytes": true}

// Effective returns the value of the argument arg (e.g. "x-message-ttl")
// that applies to the queue, from its x-arguments or, when absent there,
// from its policy ("message-ttl"); for TTL, delivery limit and length
// limits the smaller of the two applies. from is "argument" or "policy
// NAME".
func (q QueueState) Effective(arg string) (v any, from string, ok bool) {
	a, aok := q.Arguments[arg]
	p, pok := q.PolicyDefinition[strings.TrimPrefix(arg, "x-")]
	pfrom := "policy " + strconv.Quote(q.Policy)
	switch {
	case aok && pok && minWins[arg]:
		if pn, ok := number(p); ok {
			if an, ok := number(a); ok && pn < an {
				return p, pfrom, true
			}
		}
		return a, "argument", true
	case aok:
		return a, "argument", true
	case pok:
		return p, pfrom, true
	}
	return nil, "", false
}

// quorum reports whether the queue is a quorum queue.
func (q QueueState) quorum() bool {
	return q.Type == "quorum" || q.Arguments["x-queue-type"] == "quorum"
}

// ExchangeState is an exchange some queue dead-letters to, as the broker
// has it, with the bindings that have it as their source.
type ExchangeState struct {
	// Name of the exchange.
	Name string
	// Exists is false when the broker has no such exchange.
	Exists bool
	// Type is "direct", "topic", "fanout" or "headers".
	Type string
	// AlternateExchange is set when unroutable messages go elsewhere
	// (argument or policy alternate-exchange).
	AlternateExchange string
	// Bindings are the bindings from this exchange.
	Bindings []BindingState
}

// BindingState is one binding from an exchange.
type BindingState struct {
	// Destination is the queue or exchange bound.
	Destination string
	// DestinationType is "queue" or "exchange".
	DestinationType string
	// RoutingKey is the binding key.
	RoutingKey string
}

// Broker is a snapshot of what the live checks need: the broker version,
// the planned topology and 'lily topology verify's differences from it,
// the planned queues as they exist, and the exchanges and queues they
// dead-letter to. ReadBroker fills it in; CheckBroker judges it.
type Broker struct {
	// Version is the RabbitMQ version, e.g. "3.10.8"; empty if unknown.
	Version string
	// Topology is the topology planned from the configuration.
	Topology rabbitmq.Topology
	// Differences are rabbitmq.Management.Verify's result.
	Differences []rabbitmq.Difference
	// Queues are the planned queues, in plan order.
	Queues []QueueState
	// Exchanges are the dead-letter exchanges named by existing queues.
	Exchanges map[string]ExchangeState
	// OtherQueues tells whether queues named as default-exchange
	// dead-letter targets (and not planned) exist.
	OtherQueues map[string]bool
}

// queueExists reports whether the broker has the queue name.
func (b Broker) queueExists(name string) bool {
	for _, q := range b.Queues {
		if q.Name == name {
			return q.Exists
		}
	}
	return b.OtherQueues[name]
}

// CheckBroker judges a broker snapshot against the configuration (its
// queues of transport "rabbitmq"). It is pure: ReadBroker does the reading.
// Queues are judged by what the broker has, arguments and policies alike,
// so a queue declared by someone else with other arguments is judged as it
// is. Rules:
//
//   - dlq-message-ttl (error): a dead-letter queue with a message TTL:
//     dead letters expire silently.
//   - ttl-without-dlx (error): a main queue or retry bucket with a message
//     TTL and no dead-letter exchange: expired messages (for a bucket,
//     every retry) are dropped.
//   - no-delivery-limit (error; warning on RabbitMQ 4.0+, whose default of
//     20 then applies): a main quorum queue without x-delivery-limit.
//   - delivery-limit-without-dlx (error): a quorum queue with a delivery
//     limit (its own, or 4.0's default) and no dead-letter exchange:
//     messages are dropped at the limit.
//   - at-least-once-without-reject-publish (error): at-least-once
//     dead-lettering with another overflow mode silently falls back to
//     at-most-once.
//   - dlx-missing (error): the dead-letter exchange does not exist.
//   - dlx-unbound (error): the dead-letter exchange has no binding (and no
//     alternate exchange) for the dead-letter routing key — the queue's
//     x-dead-letter-routing-key or, without one, its binding keys; for the
//     default exchange, no queue of that name. Exchange-to-exchange
//     bindings count as routed; headers exchanges with any binding too.
//   - queue-not-quorum (error): a main queue that is classic (or a
//     stream): RabbitMQ sets no x-delivery-count there, so a crash-type
//     poison message is redelivered forever; Lily's consumer refuses it.
//   - delivery-count-semantics (warning, once): RabbitMQ 4.3 or newer.
//   - topology-drift: every remaining difference of 'lily topology verify'
//     (error when missing or inequivalent, warning for an unexpected
//     argument), with why it matters.
func CheckBroker(cfg config.Config, b Broker) []lint.Finding {
	cfg = cfg.WithDefaults()
	var out []lint.Finding
	// The differences of 'lily topology verify' that a finding explains
	// better: not reported twice.
	covered := map[string]bool{}
	for _, q := range b.Queues {
		if q.Exists {
			out = append(out, checkQueue(cfg, b, q, covered)...)
		}
	}
	if versionAtLeast(b.Version, 4, 3) && len(b.Queues) > 0 {
		out = append(out, lint.Finding{
			Severity: lint.Warning, Code: lint.CodeDeliveryCountSemantics,
			What: fmt.Sprintf("the broker is RabbitMQ %s, which counts deliveries differently from 3.10", b.Version),
			Why: "from RabbitMQ 4.3 x-delivery-count counts failed (returned) deliveries, not acquisitions; Lily declares " +
				"x-delivery-limit = delivery_limit − 1 because RabbitMQ 3.10.8 hands a message out x-delivery-limit + 1 times, " +
				"so on this broker a crash-type poison message may be handed out a different number of times than delivery_limit says",
			Fix: "check on a test queue how many times a message whose consumer dies is delivered before the broker " +
				"dead-letters it, and adjust delivery_limit; Lily's own delivery_limit check still applies before the handler",
		})
	}
	for _, d := range b.Differences {
		if covered[diffKey(b.Topology, d)] {
			continue
		}
		out = append(out, drift(b.Topology, d))
	}
	return out
}

// checkQueue returns the findings about one existing queue, and marks in
// covered the differences (diffKey) they explain.
func checkQueue(cfg config.Config, b Broker, q QueueState, covered map[string]bool) []lint.Finding {
	var out []lint.Finding
	add := func(sev lint.Severity, code, what, why, fix string, covers ...string) {
		out = append(out, lint.Finding{Severity: sev, Queue: q.Source, Code: code, What: what, Why: why, Fix: fix})
		cover(covered, covers...)
	}
	dlxV, dlxFrom, hasDLX := q.Effective("x-dead-letter-exchange")
	dlx, _ := dlxV.(string)
	ttl, ttlFrom, hasTTL := q.Effective("x-message-ttl")
	limitV, limitFrom, hasLimit := q.Effective("x-delivery-limit")
	// RabbitMQ 4.x: a negative limit switches the default of 20 off.
	n, _ := number(limitV)
	limitOff := hasLimit && n < 0
	hasLimit = hasLimit && !limitOff
	defaultLimit := !hasLimit && !limitOff && versionAtLeast(b.Version, 4, 0)
	role := roleName(q.Role)

	if q.Role == "main" && !q.quorum() {
		out = append(out, notQuorum(q))
		cover(covered, "argument|"+q.Name+"|x-queue-type", "argument|"+q.Name+"|x-delivery-limit", "argument|"+q.Name+"|x-dead-letter-strategy")
	}

	switch {
	case hasTTL && q.Role == "dlq":
		where := "expired dead letters are dropped"
		if hasDLX {
			where = fmt.Sprintf("expired dead letters are moved to exchange %q, where Lily does not look for them", dlx)
		}
		add(lint.Error, lint.CodeDLQMessageTTL,
			fmt.Sprintf("dead-letter queue %s has a message TTL of %s ms (%s)", q.Name, fmtValue(ttl), ttlFrom),
			"dead letters expire without a decision: "+where+", and no counter rises; Lily keeps dead letters for "+
				"dlq_retention_hours and discards them with a record, so the dead-letter queue must never expire anything",
			removeFix(q, "x-message-ttl", ttlFrom), "argument|"+q.Name+"|x-message-ttl")
	case hasTTL && !hasDLX:
		why := "expired messages are dropped silently"
		if q.Role == "retry" {
			why = fmt.Sprintf("the TTL is the retry delay: without a dead-letter exchange every retried message is dropped when "+
				"its delay ends instead of returning to %s", q.Source)
		}
		add(lint.Error, lint.CodeTTLWithoutDLX,
			fmt.Sprintf("%s %s has a message TTL of %s ms (%s) and no dead-letter exchange", role, q.Name, fmtValue(ttl), ttlFrom),
			why, "declare the queue as 'lily topology apply' does (delete it first: arguments cannot change in place), "+
				"or set dead-letter-exchange through a policy", noDLX(q)...)
	}

	if q.quorum() && q.Role == "main" && !hasLimit {
		sev, why := lint.Error, "RabbitMQ before 4.0 has no default delivery limit: the broker never dead-letters a message however "+
			"often it is handed out, so a crash-type poison message is redelivered forever to any consumer that does not "+
			"count x-delivery-count itself, crash-looping it"
		if limitOff {
			why = fmt.Sprintf("x-delivery-limit = %s (%s) switches the broker's limit off: a crash-type poison message is "+
				"redelivered forever to any consumer that does not count x-delivery-count itself, crash-looping it", fmtValue(limitV), limitFrom)
		} else if defaultLimit {
			sev, why = lint.Warning, fmt.Sprintf("RabbitMQ %s applies its default delivery limit of 20, not the configured delivery_limit", b.Version)
		}
		want := ""
		if qc, ok := cfg.Queue(q.Source); ok {
			want = fmt.Sprintf(" (x-delivery-limit = %d for delivery_limit = %d)", qc.Settings().DeliveryLimit-1, qc.Settings().DeliveryLimit)
		}
		add(sev, lint.CodeNoDeliveryLimit, fmt.Sprintf("main queue %s has no x-delivery-limit", q.Name), why,
			"declare it with a delivery limit"+want+" ('lily topology apply' after deleting the queue), or set "+
				"delivery-limit through a policy", "argument|"+q.Name+"|x-delivery-limit")
	}

	// Buckets have no consumers: nothing is ever delivered from them.
	if q.quorum() && q.Role != "retry" && !hasDLX && (hasLimit || defaultLimit) {
		limit := fmt.Sprintf("RabbitMQ %s's default delivery limit of 20", b.Version)
		if hasLimit {
			limit = fmt.Sprintf("x-delivery-limit %s (%s)", fmtValue(limitV), limitFrom)
		}
		why := "a message that reaches the delivery limit is dropped: no dead letter, no evidence, no counter; a crash-type " +
			"poison message, and its innocent neighbours in flight with it, vanish"
		fix := fmt.Sprintf("set x-dead-letter-exchange (Lily's is %q, routing key %q, at-least-once, reject-publish): "+
			"'lily topology apply' after deleting the queue, or a policy", deadLetterExchange(cfg, q), q.Source)
		if q.Role == "dlq" {
			why = "a dead letter whose ingestion fails that many times (a catalog that cannot commit, a consumer that " +
				"crashes on it) is dropped by the broker: the last copy of the message is gone"
			fix = "remove the limit from the dead-letter queue: a policy with delivery-limit = -1 (RabbitMQ 4.0+) matching " +
				q.Name + ", or re-declare it with x-delivery-limit = -1"
		}
		add(lint.Error, lint.CodeDeliveryLimitWithoutDLX,
			fmt.Sprintf("quorum %s %s has %s and no dead-letter exchange", role, q.Name, limit), why, fix, noDLX(q)...)
	}

	if !hasDLX {
		return out
	}
	strategy, _, _ := q.Effective("x-dead-letter-strategy")
	overflow, _, _ := q.Effective("x-overflow")
	if strategy == "at-least-once" && overflow != "reject-publish" {
		got := "the default drop-head"
		if overflow != nil {
			got = fmtValue(overflow)
		}
		add(lint.Error, lint.CodeAtLeastOnceWithoutRejectPublish,
			fmt.Sprintf("%s %s dead-letters at-least-once with x-overflow = %s", role, q.Name, got),
			"RabbitMQ needs x-overflow = reject-publish for at-least-once dead-lettering and otherwise silently falls back to "+
				"at-most-once: a dead letter is removed before the target confirms it and is lost if the target is unavailable "+
				"or full; a full queue also drops its oldest messages",
			"declare the queue with x-overflow = reject-publish ('lily topology apply' after deleting it), or set overflow "+
				"through a policy", "argument|"+q.Name+"|x-overflow")
	}
	out = append(out, checkRouting(cfg, b, q, dlx, dlxFrom, covered)...)
	return out
}

// notQuorum is the queue-not-quorum finding of main queue q, whose type
// the management API or AMQP (RabbitMQLive) told.
func notQuorum(q QueueState) lint.Finding {
	typ := q.Type
	if typ == "" {
		typ = "classic"
	}
	return lint.Finding{Severity: lint.Error, Queue: q.Source, Code: lint.CodeNotQuorum,
		What: fmt.Sprintf("main queue %s is a %s queue, not a quorum queue", q.Name, typ),
		Why: "a classic queue never sets x-delivery-count (checked on RabbitMQ 3.10.8: absent on every redelivery, crash-type " +
			"ones included; only the redelivered flag is set) and has no delivery limit, so nothing counts how often a " +
			"message was handed out: a message that kills its consumer is redelivered forever, crash-looping every " +
			"consumer; Lily's consumer refuses to start on such a queue",
		Fix: "a queue's type cannot change in place: move its messages out (a shovel into a temporary queue), delete " + q.Name +
			", declare it as quorum with 'lily topology apply', and move the messages back"}
}

// noDLX returns the differences a finding about q's missing dead-letter
// exchange explains: the exchange and the settings that need it.
func noDLX(q QueueState) []string {
	return []string{"argument|" + q.Name + "|x-dead-letter-exchange", "argument|" + q.Name + "|x-dead-letter-routing-key",
		"argument|" + q.Name + "|x-dead-letter-strategy"}
}

// cover marks the differences keys as explained by a finding.
func cover(covered map[string]bool, keys ...string) {
	for _, k := range keys {
		covered[k] = true
	}
}

// checkRouting reports a dead-letter exchange that is missing or routes
// the queue's dead-letter routing key nowhere, marking in covered the
// differences it explains.
func checkRouting(cfg config.Config, b Broker, q QueueState, dlx, dlxFrom string, covered map[string]bool) []lint.Finding {
	keys := deadLetterKeys(cfg, q)
	role := roleName(q.Role)
	why := "RabbitMQ drops a dead letter it cannot route, silently: no error, no counter; every message this queue " +
		"dead-letters (delivery limit, expired TTL, rejection) is lost"
	if q.Role == "retry" {
		why = fmt.Sprintf("a retried message returns to %s through this route when its delay ends; RabbitMQ drops it "+
			"silently when the route leads nowhere", q.Source)
	}
	if dlx == "" {
		var out []lint.Finding
		for _, k := range keys {
			if !b.queueExists(k) {
				out = append(out, lint.Finding{Severity: lint.Error, Queue: q.Source, Code: lint.CodeDLXUnbound,
					What: fmt.Sprintf("%s %s dead-letters to the default exchange with routing key %q, and no queue is named %q", role, q.Name, k, k),
					Why:  why,
					Fix:  fmt.Sprintf("declare queue %q ('lily topology apply'), or fix x-dead-letter-routing-key", k)})
			}
		}
		return out
	}
	ex := b.Exchanges[dlx]
	if !ex.Exists {
		cover(covered, "exchange|"+dlx, "binding-from|"+dlx)
		return []lint.Finding{{Severity: lint.Error, Queue: q.Source, Code: lint.CodeDLXMissing,
			What: fmt.Sprintf("%s %s dead-letters to exchange %q (%s), which does not exist", role, q.Name, dlx, dlxFrom),
			Why:  why,
			Fix:  fmt.Sprintf("declare exchange %q with the dead-letter queue bound to it ('lily topology apply'), or point x-dead-letter-exchange at an existing one", dlx)}}
	}
	if ex.AlternateExchange != "" {
		return nil
	}
	var out []lint.Finding
	for _, k := range keys {
		if !routes(ex, k) {
			out = append(out, lint.Finding{Severity: lint.Error, Queue: q.Source, Code: lint.CodeDLXUnbound,
				What: fmt.Sprintf("%s %s dead-letters to %s exchange %q with routing key %q, and nothing is bound for that key",
					role, q.Name, ex.Type, dlx, k),
				Why: why,
				Fix: fmt.Sprintf("bind the dead-letter queue to %q with routing key %q ('lily topology apply' restores Lily's binding)", dlx, k)})
			cover(covered, "binding-from|"+dlx)
		}
	}
	return out
}

// deadLetterKeys returns the routing keys q's dead letters carry: its
// x-dead-letter-routing-key or, without one, the keys messages arrive
// with (a main queue's binding keys; a bucket's name; a DLQ's source).
// Binding keys with topic wildcards are skipped: the message's real key
// is unknown.
func deadLetterKeys(cfg config.Config, q QueueState) []string {
	if v, _, ok := q.Effective("x-dead-letter-routing-key"); ok {
		if s, ok := v.(string); ok {
			return []string{s}
		}
	}
	switch q.Role {
	case "retry":
		return []string{q.Name}
	case "dlq":
		return []string{q.Source}
	}
	qc, _ := cfg.Queue(q.Source)
	var keys []string
	for _, k := range qc.BindingKeys {
		if !strings.ContainsAny(k, "*#") {
			keys = append(keys, k)
		}
	}
	return keys
}

// routes reports whether exchange ex routes routing key k anywhere.
func routes(ex ExchangeState, k string) bool {
	return slices.ContainsFunc(ex.Bindings, func(b BindingState) bool {
		switch ex.Type {
		case "direct":
			return b.RoutingKey == k
		case "topic":
			return topicMatch(strings.Split(b.RoutingKey, "."), strings.Split(k, "."))
		}
		return true // fanout, headers, plugins: any binding may route it
	})
}

// topicMatch matches the words of a routing key against a topic binding
// pattern: "*" is one word, "#" zero or more.
func topicMatch(pattern, key []string) bool {
	if len(pattern) == 0 {
		return len(key) == 0
	}
	switch pattern[0] {
	case "#":
		for i := 0; i <= len(key); i++ {
			if topicMatch(pattern[1:], key[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(key) > 0 && topicMatch(pattern[1:], key[1:])
	}
	return len(key) > 0 && key[0] == pattern[0] && topicMatch(pattern[1:], key[1:])
}

// deadLetterExchange returns Lily's dead-letter exchange for q's source.
func deadLetterExchange(cfg config.Config, q QueueState) string {
	if qc, ok := cfg.Queue(q.Source); ok {
		return rabbitmq.DeadLetterExchange(qc.Exchange)
	}
	return ""
}

// removeFix says how to remove a setting from a queue, depending on where
// it comes from.
func removeFix(q QueueState, arg, from string) string {
	if from != "argument" {
		return fmt.Sprintf("change %s so that it no longer applies %s to %s (or give %s a higher-priority policy without it)",
			from, strings.TrimPrefix(arg, "x-"), q.Name, q.Name)
	}
	return fmt.Sprintf("move the queue's messages into the catalog, delete %s and re-declare it without %s ('lily topology apply')", q.Name, arg)
}

// roleName names a queue role for people.
func roleName(role string) string {
	switch role {
	case "main":
		return "main queue"
	case "retry":
		return "retry bucket"
	case "dlq":
		return "dead-letter queue"
	}
	return "queue"
}

// number returns a JSON or Go number as float64.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// fmtValue formats an argument value: numbers without exponent.
func fmtValue(v any) string {
	if n, ok := number(v); ok {
		return strconv.FormatFloat(n, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// versionAtLeast reports whether version ("3.10.8", "4.3.0-rc.1") is at
// least major.minor; an unknown version is not.
func versionAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}
