package lint

import (
	"fmt"
	"time"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/plan"
)

// Codes of the Azure Functions poison-queue checks ([[foreign_dlq]] kind
// = "azure-functions"; the live one is brokers/livelint's).
const (
	// CodeFunctionsMaxDequeueOne (warning): max_dequeue_count = 1.
	CodeFunctionsMaxDequeueOne = "functions-max-dequeue-one"
	// CodeFunctionsMaxDequeueHigh (warning): max_dequeue_count above
	// MaxSensibleDeliveryLimit.
	CodeFunctionsMaxDequeueHigh = "functions-max-dequeue-high"
	// CodeFunctionsRetrySpanShort (error): the function's retries, spaced
	// by visibility_timeout_seconds, end before expected_outage does.
	CodeFunctionsRetrySpanShort = "functions-retry-span-short"
	// CodeFunctionsPoisonUndrained (error, live): a "<queue>-poison"
	// queue in the storage account that no [[foreign_dlq]] drains.
	CodeFunctionsPoisonUndrained = "functions-poison-undrained"
)

// functionsFindings judges the function apps of the [[foreign_dlq]] kind
// = "azure-functions" entries. Functions counts every dequeue alike — a
// transient failure, a crash, a timeout — up to maxDequeueCount, and then
// moves the message to its poison queue:
//
//   - functions-max-dequeue-one (warning): max_dequeue_count = 1; one
//     transient failure or host restart moves a message to the poison queue.
//   - functions-max-dequeue-high (warning): max_dequeue_count > 20; a
//     message that crashes the host does so that many times first.
//   - functions-retry-span-short (error): with expected_outage, the
//     (max_dequeue_count − 1) waits of visibility_timeout_seconds end before
//     the outage does (package plan's outage arithmetic): every message
//     that arrives early in such an outage lands in the poison queue.
func functionsFindings(cfg config.Config) []Finding {
	var out []Finding
	for _, f := range cfg.ForeignDLQs {
		if f.Kind != config.ForeignAzureFunctions {
			continue
		}
		n := f.MaxDequeueCountOrDefault()
		add := func(sev Severity, code, what, why, fix string) {
			out = append(out, Finding{Severity: sev, Queue: f.Queue, Code: code, What: what, Why: why, Fix: fix})
		}
		switch {
		case n == 1:
			add(Warning, CodeFunctionsMaxDequeueOne, "max_dequeue_count = 1: the function gets one attempt",
				"Functions counts every dequeue alike: one transient error, timeout or host restart moves the message to "+
					f.Queue+"-poison, with no retry",
				fmt.Sprintf("set maxDequeueCount (host.json extensions.queues) and max_dequeue_count to %d (Functions' default) or more", config.DefaultFunctionsMaxDequeueCount))
		case n > MaxSensibleDeliveryLimit:
			add(Warning, CodeFunctionsMaxDequeueHigh, fmt.Sprintf("max_dequeue_count = %d is above %d", n, MaxSensibleDeliveryLimit),
				fmt.Sprintf("Functions cannot tell a crash from a transient error: a message that kills the host is dequeued %d times, "+
					"%d host restarts with every message in flight beside it, before it reaches the poison queue", n, n),
				fmt.Sprintf("lower maxDequeueCount to at most %d, and give transient errors time with visibilityTimeout instead", MaxSensibleDeliveryLimit))
		}
		if f, ok := functionsSpanShort(f, n); ok {
			out = append(out, f)
		}
	}
	return out
}

// functionsSpanShort is the functions-retry-span-short finding of f.
func functionsSpanShort(f config.ForeignDLQConfig, attempts int) (Finding, bool) {
	outage, err := time.ParseDuration(f.ExpectedOutage)
	if err != nil || outage <= 0 {
		return Finding{}, false
	}
	vis := time.Duration(f.VisibilityTimeoutSeconds) * time.Second
	span := time.Duration(attempts-1) * vis
	if span >= outage {
		return Finding{}, false
	}
	lost := outage - span
	if vis > 0 {
		if sch, err := plan.FixedInterval(attempts, vis); err == nil {
			if r, err := plan.Outage(plan.OutageParams{Rate: 1, Outage: outage, Schedule: sch}); err == nil {
				lost = time.Duration(r.DeadLettered * float64(time.Second))
			}
		}
	}
	need := int(outage/max(vis, time.Second)) + 1
	fix := fmt.Sprintf("set visibilityTimeout (host.json) to at least %s with maxDequeueCount %d",
		plan.FormatSeconds((outage / time.Duration(max(attempts-1, 1))).Seconds()), attempts)
	if vis > 0 && need <= MaxSensibleDeliveryLimit {
		fix += fmt.Sprintf(", or maxDequeueCount to %d", need)
	}
	return Finding{
		Severity: Error, Queue: f.Queue, Code: CodeFunctionsRetrySpanShort,
		What: fmt.Sprintf("the function's %d dequeues, %s apart (visibility_timeout_seconds), span %s, shorter than expected_outage = %q",
			attempts, plan.FormatSeconds(vis.Seconds()), plan.FormatSeconds(span.Seconds()), f.ExpectedOutage),
		Why: fmt.Sprintf("every message that arrives in the first %s of such an outage fails all %d dequeues and is moved to %s-poison "+
			"('lily plan outage --rate R --outage %s --attempts %d --interval %s': R × %s healthy messages)",
			plan.FormatSeconds(lost.Seconds()), attempts, f.Queue, f.ExpectedOutage, attempts, vis, plan.FormatNumber(lost.Seconds())),
		Fix: fix + "; the poison queue is then drained into the catalog, and 'lily dlq redrive' sends them back after the outage",
	}, true
}
