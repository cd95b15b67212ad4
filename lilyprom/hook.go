package lilyprom

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
)

// RedriveObserver is called by the code that redrives dead letters, once
// per entry it handled, with the entry's source queue and the outcome
// (RedriveRedriven, RedriveNeedsManual, RedriveFailed; the catalog's
// Outcome* constants of the same names). *Hook implements it; wire it to
// redrive.Params.OnEntry:
//
//	OnEntry: func(e catalog.EntryRef, outcome string) { hook.Redrive(e.Queue, outcome) }
type RedriveObserver interface {
	Redrive(queue, outcome string)
}

// Hook counts the runtime's outcomes as Prometheus metrics. Attach it to
// consumers through lily.ConsumerOptions.Hooks; one Hook serves any number
// of consumers and queues. It is safe for concurrent use; Observe resolves
// a queue's series once and then only increments them.
type Hook struct {
	messages *prometheus.CounterVec
	duration *prometheus.HistogramVec
	retries  *prometheus.HistogramVec
	inflow   *prometheus.CounterVec
	refused  *prometheus.CounterVec
	breaker  *prometheus.GaugeVec
	redrive  *prometheus.CounterVec
	abandon  *prometheus.GaugeVec
	inbox    inboxMetrics

	queues sync.Map // queue name -> *queueSeries
	mu     sync.Mutex
}

var (
	_ lily.Hook       = (*Hook)(nil)
	_ RedriveObserver = (*Hook)(nil)
)

// queueSeries are one queue's series, resolved once.
type queueSeries struct {
	outcomes map[string]prometheus.Counter
	duration prometheus.Observer
	retries  prometheus.Observer
	breaker  prometheus.Gauge
	abandon  prometheus.Gauge
	inflow   sync.Map // reason -> prometheus.Counter
	refused  prometheus.Counter
	redrive  sync.Map // outcome -> prometheus.Counter
}

// runtimeReasons are the dead-letter reasons the runtime itself produces:
// their inflow series exist from a queue's first event.
var runtimeReasons = []evidence.Reason{evidence.ReasonPermanent, evidence.ReasonRetriesExhausted,
	evidence.ReasonDeliveryLimit, evidence.ReasonInvalidRetryCount}

// NewHook creates the runtime metrics and registers them with reg (nil
// means prometheus.DefaultRegisterer). It fails if reg already has metrics
// of the same names, e.g. a second Hook on the same registry.
func NewHook(reg prometheus.Registerer) (*Hook, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	h := &Hook{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricMessages,
			Help: "Settled deliveries by outcome: acked, retried, dead_lettered, released, held, settle_failed, parked.",
		}, []string{LabelQueue, LabelOutcome}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricHandlerDuration,
			Help:    "How long the handler ran for one delivery, in seconds (immediate retries included).",
			Buckets: slices.Clone(DurationBuckets),
		}, []string{LabelQueue}),
		retries: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricRetriesAtAck,
			Help:    "Framework retries (x-retry-count) a message had taken when its handler succeeded: where successes stop is where retry_attempts belongs.",
			Buckets: slices.Clone(RetryBuckets),
		}, []string{LabelQueue}),
		inflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDLQInflow,
			Help: "Messages dead-lettered by this process's consumers, by dead-letter reason; in 'lily serve', also the dead letters a broker made by itself, counted as they are ingested.",
		}, []string{LabelQueue, LabelReason}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDLQRefused,
			Help: "Dead letters stored in the catalog only because the broker refused their dead-letter copy (the DLQ is full, or the copy is too large): an operator must act.",
		}, []string{LabelQueue}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricBreakerState,
			Help: "Circuit breaker state of the queue's consumer: 0 closed, 1 half_open, 2 open.",
		}, []string{LabelQueue}),
		redrive: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRedrive,
			Help: "Redriven dead letters by outcome: redriven, needs_manual, failed.",
		}, []string{LabelQueue, LabelOutcome}),
		abandon: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricAbandoned,
			Help: "Handlers abandoned past their timeout that have not returned yet; each holds a handler slot (at the consumer's concurrency no handler starts).",
		}, []string{LabelQueue}),
	}
	h.inbox = newInboxMetrics()
	if err := registerAll(reg, "runtime", h.messages, h.duration, h.retries, h.inflow, h.refused, h.breaker, h.redrive, h.abandon,
		h.inbox.duplicates, h.inbox.stale, h.inbox.twins); err != nil {
		return nil, err
	}
	return h, nil
}

// Init creates the series of the given queues at zero — every outcome,
// the runtime's dead-letter reasons, the redrive outcomes, breaker closed —
// so that rate() and alerts see a queue before its first event. Observe
// does the same for a queue on its first event.
func (h *Hook) Init(queues ...string) {
	for _, q := range queues {
		h.series(q)
	}
}

// series returns the queue's series, creating them on first use.
func (h *Hook) series(queue string) *queueSeries {
	if s, ok := h.queues.Load(queue); ok {
		return s.(*queueSeries)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.queues.Load(queue); ok {
		return s.(*queueSeries)
	}
	s := &queueSeries{
		outcomes: make(map[string]prometheus.Counter, len(MessageOutcomes)),
		duration: h.duration.WithLabelValues(queue),
		retries:  h.retries.WithLabelValues(queue),
		breaker:  h.breaker.WithLabelValues(queue),
		abandon:  h.abandon.WithLabelValues(queue),
		refused:  h.refused.WithLabelValues(queue),
	}
	for _, o := range MessageOutcomes {
		s.outcomes[o] = h.messages.WithLabelValues(queue, o)
	}
	for _, r := range runtimeReasons {
		s.inflow.Store(string(r), h.inflow.WithLabelValues(queue, string(r)))
	}
	for _, o := range RedriveOutcomes {
		s.redrive.Store(o, h.redrive.WithLabelValues(queue, o))
	}
	s.breaker.Set(BreakerClosedValue)
	h.queues.Store(queue, s)
	return s
}

// Observe implements lily.Hook: it counts e's outcome, observes the
// handler's duration, counts a dead-lettering's reason and follows the
// breaker and the abandoned handlers. Faults are reported by the runtime beside the delivery's
// outcome and are not counted again; unknown kinds are ignored.
func (h *Hook) Observe(_ context.Context, e lily.Event) {
	s := h.series(e.Queue)
	switch e.Kind {
	case lily.EventBreaker:
		s.breaker.Set(breakerValue(e.Breaker))
		return
	case lily.EventAbandoned, lily.EventStalled:
		s.abandon.Set(float64(e.Abandoned))
		return
	case lily.EventFault:
		return
	case lily.EventDuplicate, lily.EventStale, lily.EventTwin:
		h.inbox.observe(e)
		return
	}
	c, ok := s.outcomes[string(e.Kind)]
	if !ok {
		return
	}
	c.Inc()
	switch e.Kind {
	case lily.EventDeadLettered:
		h.counter(&s.inflow, h.inflow, e.Queue, reasonLabel(e.Reason)).Inc()
		if e.Refused != "" {
			s.refused.Inc()
		}
	case lily.EventSettleFailed:
		return // the handler's duration is not in the event
	case lily.EventAcked:
		s.retries.Observe(float64(e.RetryCount))
	}
	if e.HandlerDuration > 0 {
		s.duration.Observe(e.HandlerDuration.Seconds())
	}
}

// Redrive implements RedriveObserver: it counts one redriven entry of
// queue by outcome. Dry-run outcomes ("would_...") are not counted; an
// outcome outside RedriveOutcomes is counted as "other".
func (h *Hook) Redrive(queue, outcome string) {
	if strings.HasPrefix(outcome, "would_") {
		return
	}
	if !slices.Contains(RedriveOutcomes, outcome) {
		outcome = Other
	}
	s := h.series(queue)
	h.counter(&s.redrive, h.redrive, queue, outcome).Inc()
}

// BrokerDeadLettered counts a dead letter of queue that a broker made by
// itself (no Lily evidence: RabbitMQ's delivery limit, expiry, overflow,
// rejection), when it is ingested into the catalog for the first time:
// no consumer's Hook saw it. reason is the catalog entry's reason (outside
// the known reasons: "other").
func (h *Hook) BrokerDeadLettered(queue, reason string) {
	s := h.series(queue)
	h.counter(&s.inflow, h.inflow, queue, reasonLabel(reason)).Inc()
}

// counter returns the child of vec for (queue, label), cached in m.
func (h *Hook) counter(m *sync.Map, vec *prometheus.CounterVec, queue, label string) prometheus.Counter {
	if c, ok := m.Load(label); ok {
		return c.(prometheus.Counter)
	}
	c, _ := m.LoadOrStore(label, vec.WithLabelValues(queue, label))
	return c.(prometheus.Counter)
}

// reasonLabel maps a dead-letter reason to its label value: a known
// evidence.Reason, else "other".
func reasonLabel(r string) string {
	if knownReasons[r] {
		return r
	}
	return Other
}

// knownReasons are the values of evidence.Reasons.
var knownReasons = func() map[string]bool {
	m := map[string]bool{}
	for _, r := range evidence.Reasons() {
		m[string(r)] = true
	}
	return m
}()

// breakerValue is the gauge value of a breaker state.
func breakerValue(s lily.BreakerState) float64 {
	switch s {
	case lily.BreakerOpen:
		return BreakerOpenValue
	case lily.BreakerHalfOpen:
		return BreakerHalfOpenValue
	}
	return BreakerClosedValue
}

// slogPrintln adapts slog.Default to promhttp.Logger.
type slogPrintln struct{}

func (slogPrintln) Println(v ...any) {
	slog.Default().Error("lilyprom: serving metrics", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}

// registerAll registers cs with reg (nil: prometheus.DefaultRegisterer),
// all or none: when one is refused, those registered before it are
// unregistered again. what names the metrics in the error.
func registerAll(reg prometheus.Registerer, what string, cs ...prometheus.Collector) error {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("lilyprom: register %s metrics: %w", what, err)
		}
	}
	return nil
}
