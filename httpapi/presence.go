package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/nearest"
	"github.com/lily-mq/lily/ledger"
)

// consumersJSON is GET /api/consumers: every consumer instance's last
// heartbeat (stale ones marked, not hidden) and every queue that can be
// paused, with its pause.
type consumersJSON struct {
	Now       time.Time          `json:"now"`
	Consumers []catalog.Consumer `json:"consumers"`
	Queues    []queuePauseJSON   `json:"queues"`
}

// queuePauseJSON is one queue of GET /api/consumers and the answer of a
// pause or resume.
type queuePauseJSON struct {
	Queue    string     `json:"queue"`
	Paused   bool       `json:"paused"`
	Reason   string     `json:"reason,omitempty"`
	Actor    string     `json:"actor,omitempty"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// Changed, in a pause or resume answer, says whether the request
	// changed anything (false: it was already paused, or not paused).
	Changed *bool `json:"changed,omitempty"`
}

func pauseJSON(p catalog.Pause) queuePauseJSON {
	at := p.PausedAt
	return queuePauseJSON{Queue: p.Queue, Paused: true, Reason: p.Reason, Actor: p.Actor, PausedAt: &at}
}

func (s *Server) handleConsumers(w http.ResponseWriter, r *http.Request, _ *principal) {
	ctx := r.Context()
	now := s.o.Now()
	cs, err := s.o.Store.Consumers(ctx, r.URL.Query().Get("queue"), now)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ps, err := s.o.Store.Pauses(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	names, err := s.pausableQueues(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := consumersJSON{Now: now.UTC(), Consumers: cs, Queues: []queuePauseJSON{}}
	for _, q := range names {
		i := slices.IndexFunc(ps, func(p catalog.Pause) bool { return p.Queue == q })
		if i >= 0 {
			out.Queues = append(out.Queues, pauseJSON(ps[i]))
		} else {
			out.Queues = append(out.Queues, queuePauseJSON{Queue: q})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// pausableQueues are the queues a pause may name, sorted: those of the
// configuration, of the catalog's ledger, with a consumer, or paused.
func (s *Server) pausableQueues(ctx context.Context) ([]string, error) {
	var names []string
	for _, q := range s.o.Config.Queues {
		names = append(names, q.Name)
	}
	rows, err := ledger.New(s.o.Store).Rows(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		names = append(names, row.Queue)
	}
	cs, err := s.o.Store.Consumers(ctx, "", s.o.Now())
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		names = append(names, c.Queue)
	}
	ps, err := s.o.Store.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		names = append(names, p.Queue)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// pauseRequest is the optional body of POST /api/queues/{queue}/pause.
type pauseRequest struct {
	Reason string `json:"reason"`
}

func (s *Server) handlePause(w http.ResponseWriter, r *http.Request, p *principal) {
	s.pauseOrResume(w, r, p, true)
}

func (s *Server) handleResume(w http.ResponseWriter, r *http.Request, p *principal) {
	s.pauseOrResume(w, r, p, false)
}

// pauseOrResume pauses or resumes the queue of the path, as 'lily queue
// pause|resume' does: an unknown queue is refused (400, naming the known
// ones), the decision is audited under the principal's name.
func (s *Server) pauseOrResume(w http.ResponseWriter, r *http.Request, p *principal, pause bool) {
	ctx := r.Context()
	queue := r.PathValue("queue")
	var req pauseRequest
	if r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	known, err := s.pausableQueues(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !slices.Contains(known, queue) {
		msg := fmt.Sprintf("queue %s: unknown queue", queue)
		if n := nearest.Name(queue, known, 3); n != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", n)
		}
		s.fail(w, r, badField("queue", "%s; known: %s", msg, strings.Join(known, ", ")))
		return
	}
	var changed bool
	if pause {
		changed, err = s.o.Store.PauseQueue(ctx, queue, req.Reason, p.name, s.o.Now())
	} else {
		changed, err = s.o.Store.ResumeQueue(ctx, queue, p.name, s.o.Now())
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := queuePauseJSON{Queue: queue}
	if cur, paused, err := s.o.Store.QueuePause(ctx, queue); err != nil {
		s.fail(w, r, err)
		return
	} else if paused {
		out = pauseJSON(cur)
	}
	out.Changed = &changed
	writeJSON(w, http.StatusOK, out)
}

// pausedReasons are /healthz's lines for paused queues: reported, not a
// failure (an operator chose it), so that a paused queue's growing lag is
// explained where it is looked at.
func pausedReasons(ps []catalog.Pause) []string {
	var out []string
	for _, p := range ps {
		why := p.Reason
		if why == "" {
			why = "no reason given"
		}
		out = append(out, fmt.Sprintf("queue %s: paused by %s since %s (%s); its consumers take no messages until 'lily queue resume --queue %s'",
			p.Queue, p.Actor, p.PausedAt.Format(time.RFC3339), why, p.Queue))
	}
	return out
}
