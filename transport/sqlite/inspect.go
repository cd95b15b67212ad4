package sqlite

import (
	"context"
	"fmt"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

var _ transport.QueueInspector = (*Transport)(nil)

// MessageStatuses reports what became of messages of queue (by event ID)
// that are still in it: waiting, received by a consumer (leased), or a
// retry copy (a consumer failed on it). An event ID missing from the map
// has no message left in the queue. A redrive sample is judged by it
// (transport.QueueInspector).
func (t *Transport) MessageStatuses(ctx context.Context, queue string, eventIDs []string) (map[string]transport.MessageStatus, error) {
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	out := map[string]transport.MessageStatus{}
	for start := 0; start < len(eventIDs); start += 500 {
		chunk := eventIDs[start:min(start+500, len(eventIDs))]
		args := []any{queue}
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := t.db.QueryContext(ctx, `SELECT event_id, receive_count, headers FROM lily_messages WHERE queue = ? AND event_id IN (`+
			qmarks(len(chunk))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite transport: message statuses in %s: %w", queue, err)
		}
		for rows.Next() {
			var id string
			var received int
			var hdr []byte
			if err := rows.Scan(&id, &received, &hdr); err != nil {
				rows.Close()
				return nil, err
			}
			st := transport.MessageWaiting
			if received > 0 {
				st = transport.MessageReceived
			}
			if h, err := transport.UnmarshalHeaders(hdr); err == nil {
				if n, ok := h[evidence.HeaderRetryCount].(int32); ok && n > 0 {
					st = transport.MessageRetried
				}
			}
			out[id] = max(out[id], st)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
