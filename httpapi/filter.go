package httpapi

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/catalog/where"
)

// filterJSON selects entries, as the filters of 'lily dlq': every member
// is optional, set members are combined with AND. GET routes take the same
// names as query parameters (ids and event_ids comma-separated).
type filterJSON struct {
	Queue           string   `json:"queue,omitempty"`
	Reason          string   `json:"reason,omitempty"`
	ErrorType       string   `json:"error_type,omitempty"`
	Fingerprint     string   `json:"fingerprint,omitempty"`
	ConsumerVersion string   `json:"consumer_version,omitempty"`
	Source          string   `json:"source,omitempty"`
	Key             string   `json:"key,omitempty"`
	Type            string   `json:"type,omitempty"`
	OlderThan       string   `json:"older_than,omitempty"`
	NewerThan       string   `json:"newer_than,omitempty"`
	IDs             []int64  `json:"ids,omitempty"`
	EventIDs        []string `json:"event_ids,omitempty"`
	RedriveCount    *int     `json:"redrive_count,omitempty"`
	// State is the entry states, comma-separated, "held" (pending,
	// parked, needs_manual) or "all". Ignored by redrive (pending only).
	State string `json:"state,omitempty"`
	// Where is a body field filter (docs/where.md), e.g.
	// .customer.id == "42".
	Where string `json:"where,omitempty"`
}

// filterFromQuery reads the filter query parameters.
func filterFromQuery(q url.Values) (filterJSON, error) {
	f := filterJSON{Queue: q.Get("queue"), Reason: q.Get("reason"), ErrorType: q.Get("error_type"), Fingerprint: q.Get("fingerprint"),
		ConsumerVersion: q.Get("consumer_version"), Source: q.Get("source"), Key: q.Get("key"), Type: q.Get("type"),
		OlderThan: q.Get("older_than"), NewerThan: q.Get("newer_than"), State: q.Get("state"), Where: q.Get("where")}
	if v := q.Get("ids"); v != "" {
		for _, part := range strings.Split(v, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
			if err != nil || id <= 0 {
				return f, badField("ids", "ids %q: %q is not an entry ID (entry IDs are positive integers, comma-separated)", v, part)
			}
			f.IDs = append(f.IDs, id)
		}
	}
	if v := q.Get("event_ids"); v != "" {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				f.EventIDs = append(f.EventIDs, id)
			}
		}
	}
	if v := q.Get("redrive_count"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, badField("redrive_count", "redrive_count %q: want an integer >= 0", v)
		}
		f.RedriveCount = &n
	}
	return f, nil
}

// queryFilter reads the filter of a GET route: held entries unless the
// state parameter says otherwise.
func (s *Server) queryFilter(q url.Values) (catalog.Filter, error) {
	fj, err := filterFromQuery(q)
	if err != nil {
		return catalog.Filter{}, err
	}
	return fj.catalogFilter(s.o.Now(), catalog.HeldStates)
}

// catalogFilter converts f; defaultStates applies when f.State is empty.
func (f filterJSON) catalogFilter(now time.Time, defaultStates []catalog.State) (catalog.Filter, error) {
	out := catalog.Filter{Queue: f.Queue, Reason: f.Reason, ErrorType: f.ErrorType, Fingerprint: f.Fingerprint,
		ConsumerVersion: f.ConsumerVersion, Source: f.Source, Key: f.Key, Type: f.Type, IDs: f.IDs, EventIDs: f.EventIDs,
		RedriveCount: f.RedriveCount, States: defaultStates}
	if f.OlderThan != "" {
		d, err := catalog.ParseAge(f.OlderThan)
		if err != nil {
			return out, badField("older_than", "older_than %v", err)
		}
		out.DeadLetteredBefore = now.Add(-d)
	}
	if f.NewerThan != "" {
		d, err := catalog.ParseAge(f.NewerThan)
		if err != nil {
			return out, badField("newer_than", "newer_than %v", err)
		}
		out.DeadLetteredAfter = now.Add(-d)
	}
	if f.Where != "" {
		w, err := where.Parse(f.Where)
		if err != nil {
			shown := f.Where
			if len(shown) > 80 { // refused for its size: not echoed whole
				shown = strings.ToValidUTF8(shown[:80], "") + "…"
			}
			return out, badField("where", "where %q: %s (see docs/where.md)", shown, strings.TrimPrefix(err.Error(), where.ErrInvalid.Error()+": "))
		}
		out.Where = w
	}
	if f.RedriveCount != nil && *f.RedriveCount < 0 {
		return out, badField("redrive_count", "redrive_count %d: want an integer >= 0", *f.RedriveCount)
	}
	for _, id := range f.IDs {
		if id <= 0 {
			return out, badField("ids", "ids: %d is not an entry ID (entry IDs are positive integers)", id)
		}
	}
	switch f.State {
	case "":
	case "held":
		out.States = catalog.HeldStates
	case "all":
		out.States = nil
	default:
		out.States = nil
		for _, part := range strings.Split(f.State, ",") {
			st := catalog.State(strings.TrimSpace(part))
			if !st.Valid() {
				return out, badField("state", "state %q: %q is not a state (pending, parked, needs_manual, redriven, discarded, erased, held or all)", f.State, part)
			}
			out.States = append(out.States, st)
		}
	}
	return out, nil
}

// intParam reads an optional integer query parameter within [lo, hi].
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badField(name, "%s %q: want an integer in %d..%d", name, v, lo, hi)
	}
	return n, nil
}

// sinceParam reads "since": a duration ago (24h, 7d) or an RFC 3339 time.
func sinceParam(q url.Values, now time.Time) (time.Time, error) {
	v := q.Get("since")
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := catalog.ParseAge(v); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, badField("since", "since %q: want a duration ago (24h, 7d) or an RFC 3339 time (2026-11-29T12:00:00Z)", v)
}

// oneOf checks that v is one of allowed (or empty).
func oneOf(field, v string, allowed ...string) error {
	if v == "" {
		return nil
	}
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return badField(field, "%s %q: must be one of %s", field, v, strings.Join(allowed, ", "))
}

// durationField reads a Go duration member such as "500ms".
func durationField(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, badField(field, "%s %q: want a positive Go duration such as 500ms, 30s or 5m", field, v)
	}
	return d, nil
}
