package evidence

import (
	"strconv"
	"time"
)

// SystemAzureFunctions: Azure Functions' queue trigger, which moves a
// message to "<queue>-poison" after maxDequeueCount dequeues, recording no
// reason, error or count. Lily's ingest of the poison queue ([[foreign_dlq]]
// kind = "azure-functions") writes what the service still tells
// (HeaderAzureFunctions*) beside the message.
const SystemAzureFunctions = "azure-functions"

// The headers of a Functions poison message, written by the ingest from
// the Storage queue's own data (docs/azqueue.md). A redrive leaves them out.
const (
	// HeaderAzureFunctionsPrefix starts every HeaderAzureFunctions* name.
	HeaderAzureFunctionsPrefix = "x-lily-azure-functions-"
	// HeaderAzureFunctionsQueue is the trigger queue the message failed on.
	HeaderAzureFunctionsQueue = "x-lily-azure-functions-queue"
	// HeaderAzureFunctionsMaxDequeueCount is the function app's
	// maxDequeueCount (the [[foreign_dlq]] entry's max_dequeue_count): the
	// dequeues after which the runtime moved it.
	HeaderAzureFunctionsMaxDequeueCount = "x-lily-azure-functions-max-dequeue-count"
	// HeaderAzureFunctionsPoisonDequeueCount is the poison message's own
	// DequeueCount when Lily took it (Lily's receive included).
	HeaderAzureFunctionsPoisonDequeueCount = "x-lily-azure-functions-poison-dequeue-count"
	// HeaderAzureFunctionsInserted is when the runtime put it in the
	// poison queue (its InsertionTime, RFC 3339): when it was dead-lettered.
	HeaderAzureFunctionsInserted = "x-lily-azure-functions-inserted"
	// HeaderAzureFunctionsMessageID is the poison message's Storage ID.
	HeaderAzureFunctionsMessageID = "x-lily-azure-functions-message-id"
)

// AzureFunctionsMaxDequeue is the reason of a Functions poison message.
const AzureFunctionsMaxDequeue = "max_dequeue_count"

// decodeAzureFunctions reads the headers of a Functions poison message.
func decodeAzureFunctions(v *view) (ForeignEvidence, bool) {
	queue := v.text(HeaderAzureFunctionsQueue)
	if queue == "" {
		return ForeignEvidence{}, false
	}
	e := ForeignEvidence{
		System: SystemAzureFunctions,
		Origin: HeaderAzureFunctionsPrefix + "*",
		Reason: AzureFunctionsMaxDequeue,
		Source: queue,
		Raw:    v.raw(HeaderAzureFunctionsPrefix),
	}
	if n, err := strconv.Atoi(v.text(HeaderAzureFunctionsMaxDequeueCount)); err == nil {
		e.Count = n
		e.Message = "moved to " + queue + "-poison after " + strconv.Itoa(n) + " dequeues (maxDequeueCount); the Functions runtime records no error"
	}
	if ts, err := time.Parse(time.RFC3339Nano, v.text(HeaderAzureFunctionsInserted)); err == nil {
		e.Time = ts.UTC()
	}
	return e, true
}
