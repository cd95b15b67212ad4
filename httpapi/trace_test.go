package httpapi

import (
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/spantest"
)

// TestDecisionsTraced: with Options.TracerProvider, a discard through the
// API is one span per entry, with the decision and the token's name as
// the actor, linked to the message's trace (the seed's traceparent); no
// span is left open. The decision's records stay as without tracing.
func TestDecisionsTraced(t *testing.T) {
	sr, tp := spantest.Recorder(t)
	f := newFixture(t, allTokens, func(o *Options) { o.TracerProvider = tp })
	var ans decideAnswer
	sel := map[string]any{"queue": "orders.created", "reason": "permanent"}
	if code := f.call("POST", "/api/discard", &operatorToken, map[string]any{"filter": sel, "reason": "malformed", "limit": 2}, &ans); code != 200 || ans.Count != 2 {
		t.Fatalf("discard: %d %+v", code, ans)
	}
	spans := sr.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per discarded entry (2)", len(spans))
	}
	for i, s := range spans {
		if s.Name() != "discard orders.created" || spantest.Attr(s, catalog.AttrActor).AsString() != "otto" ||
			spantest.Attr(s, catalog.AttrDecision).AsString() != catalog.ActionDiscard ||
			spantest.Attr(s, "messaging.message.id").AsString() != ans.Entries[i].EventID {
			t.Errorf("span %d: %s %v, want discard orders.created by otto of %s", i, s.Name(), s.Attributes(), ans.Entries[i].EventID)
		}
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("span %d: links %v, want one to the message's trace", i, l)
		}
	}
	if open := spantest.Open(sr); len(open) > 0 {
		t.Errorf("spans left open: %v", open)
	}
	if st := f.States(); st["discarded"] != 2 {
		t.Errorf("states %v, want 2 discarded", st)
	}
	f.Conserved()
}
