package kafka

import (
	"context"

	"github.com/lily-mq/lily/transport"
)

var _ transport.InFlightBreakdown = (*Transport)(nil)

// InFlightParts says who holds a queue's in-flight records: Ready, the
// main topic's records past the group's committed offsets (fetched by a
// consumer of any process and not committed, or not fetched yet — a log
// does not tell them apart, so Unacked stays 0 and they are all here);
// Retrying, the same on the retry topics. The offsets are the broker's,
// so consumers in other processes are counted as well as this one's.
func (t *Transport) InFlightParts(ctx context.Context, queue string) (transport.InFlightParts, error) {
	var p transport.InFlightParts
	topics, err := t.retryTopics(ctx, queue)
	if err != nil {
		return p, err
	}
	group := t.group(queue)
	if sg := t.shareGroupOf(queue); sg != "" {
		p.Ready, err = t.shareLag(ctx, sg, queue)
	} else {
		p.Ready, err = t.lag(ctx, group, queue)
	}
	if err != nil {
		return p, err
	}
	if len(topics) > 0 {
		if p.Retrying, err = t.lag(ctx, group, topics...); err != nil {
			return p, err
		}
	}
	return p, nil
}
