package azqueue

import (
	"context"
	"fmt"

	"github.com/lily-mq/lily/transport"
)

// Roles of a queue's Storage queues in a topology plan.
const (
	RoleMain = "main"
	RoleDLQ  = "dlq"
)

// QueuePlan is one Storage queue that Declare creates for a Lily queue.
type QueuePlan struct {
	// Queue is the Lily queue it serves.
	Queue string `json:"queue"`
	// Name is the Storage queue's name (QueueName, DeadLetterQueue).
	Name string `json:"name"`
	// Role is RoleMain or RoleDLQ.
	Role string `json:"role"`
}

// Plan returns the Storage queues Declare creates for specs, each queue
// then its DLQ, without connecting: a spec the service cannot take
// (CheckSpec) is an error naming it. A Functions poison queue is not in
// it: Azure Functions creates it, and Lily only drains it
// ([[foreign_dlq]] kind "azure-functions").
func Plan(specs []transport.QueueSpec) ([]QueuePlan, error) {
	var out []QueuePlan
	for _, q := range specs {
		if err := CheckSpec(q); err != nil {
			return nil, err
		}
		out = append(out, QueuePlan{Queue: q.Name, Name: QueueName(q.Name), Role: RoleMain},
			QueuePlan{Queue: q.Name, Name: DeadLetterQueue(q.Name), Role: RoleDLQ})
	}
	return out, nil
}

// Difference is a planned Storage queue that the service does not have.
// (A Storage queue has no settings Lily sets: existing is all there is to
// compare.)
type Difference struct {
	Queue string `json:"queue"`
	Name  string `json:"name"`
	Role  string `json:"role"`
	Got   string `json:"got"`
	Want  string `json:"want"`
}

// String describes the difference.
func (d Difference) String() string {
	return fmt.Sprintf("azure queue %s (%s of %s): %s, want %s", d.Name, d.Role, d.Queue, d.Got, d.Want)
}

// Verify compares the plan of specs with the service: every planned
// Storage queue must exist. It returns the differences (none: nil).
func (t *Transport) Verify(ctx context.Context, specs []transport.QueueSpec) ([]Difference, error) {
	plan, err := Plan(specs)
	if err != nil {
		return nil, err
	}
	var out []Difference
	for _, p := range plan {
		c, err := t.client(p.Name)
		if err != nil {
			return nil, err
		}
		if _, err := c.GetProperties(ctx, nil); err != nil {
			if !isNotFound(err) {
				return nil, fmt.Errorf("azqueue: read queue %s (Storage name %s): %w", p.Queue, p.Name, err)
			}
			out = append(out, Difference{Queue: p.Queue, Name: p.Name, Role: p.Role, Got: "missing", Want: "exists"})
		}
	}
	return out, nil
}
