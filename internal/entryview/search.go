package entryview

import (
	"time"

	"github.com/lily-mq/lily/catalog"
)

// SearchHit is one entry found by 'lily dlq search' (and GET
// /api/v1/search): the entry's summary and a snippet of its indexed text
// (the error message and the redacted body) with the matches marked.
type SearchHit struct {
	ID             int64                 `json:"id"`
	Queue          string                `json:"queue"`
	EventID        string                `json:"event_id"`
	Key            string                `json:"key,omitempty"`
	State          catalog.State         `json:"state"`
	Reason         string                `json:"reason"`
	ErrorType      string                `json:"error_type,omitempty"`
	ErrorMessage   string                `json:"error_message,omitempty"`
	Fingerprint    string                `json:"fingerprint,omitempty"`
	DeadLetteredAt time.Time             `json:"dead_lettered_at"`
	Snippet        []catalog.SnippetPart `json:"snippet,omitempty"`
	SnippetOmitted bool                  `json:"snippet_omitted,omitempty"`
}

// NewSearchHit renders h; without withSnippet (a reader not allowed to see
// bodies) the snippet, which may quote the redacted body, is left out.
func NewSearchHit(h *catalog.SearchHit, withSnippet bool) SearchHit {
	e := h.Entry
	v := SearchHit{ID: e.ID, Queue: e.Queue, EventID: e.EventID, Key: e.Key, State: e.State, Reason: e.Reason,
		ErrorType: e.ErrorType, ErrorMessage: e.ErrorMessage, Fingerprint: e.Fingerprint, DeadLetteredAt: e.DeadLetteredAt}
	if withSnippet {
		v.Snippet = h.Snippet
	} else {
		v.SnippetOmitted = true
	}
	return v
}
