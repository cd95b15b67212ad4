package rabbitmq

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"sort"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Difference is one way the live broker differs from the planned topology.
type Difference struct {
	// Kind is "exchange", "queue", "argument" or "binding".
	Kind string `json:"kind"`
	// Name is the exchange or queue (for an argument: the queue).
	Name string `json:"name"`
	// Problem is "missing", "inequivalent" or "unexpected".
	Problem string `json:"problem"`
	// Detail names the argument or binding and the values.
	Detail string `json:"detail"`
}

func (d Difference) String() string {
	return fmt.Sprintf("%s %s: %s %s", d.Kind, d.Name, d.Problem, d.Detail)
}

// Management reads the broker's state through the management plugin's
// HTTP API (AMQP cannot list arguments or bindings).
type Management struct {
	// URL of the API, e.g. http://127.0.0.1:15672.
	URL string
	// User and Password for the API.
	User, Password string
	// VHost is the virtual host. Defaults to "/".
	VHost  string
	Client *http.Client
}

// ManagementFor derives the management API of an AMQP URL: same host, port
// 15672, same credentials and virtual host.
func ManagementFor(amqpURL string) (*Management, error) {
	u, err := amqp.ParseURI(amqpURL)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	return &Management{URL: "http://" + u.Host + ":15672", User: u.Username, Password: u.Password, VHost: u.Vhost}, nil
}

// Get decodes the JSON at path of the API (e.g. "/api/overview") into v;
// found is false on 404.
func (m *Management) Get(ctx context.Context, path string, v any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL+path, nil)
	if err != nil {
		return false, err
	}
	req.SetBasicAuth(m.User, m.Password)
	client := m.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, fmt.Errorf("rabbitmq management API %s: %w (is the rabbitmq_management plugin enabled? "+
			"'rabbitmq-plugins enable rabbitmq_management'; or give --management-url)", m.URL, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode != http.StatusOK:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("rabbitmq management API %s: %s: %s", path, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return false, fmt.Errorf("rabbitmq management API %s: %w", path, err)
	}
	return true, nil
}

// VHostPath returns the virtual host, escaped for an API path. Defaults
// to "/".
func (m *Management) VHostPath() string {
	if m.VHost == "" {
		return url.PathEscape("/")
	}
	return url.PathEscape(m.VHost)
}

// Verify compares the planned topology with the live broker and returns
// every missing or inequivalent exchange, queue, argument and binding.
func (m *Management) Verify(ctx context.Context, top Topology) ([]Difference, error) {
	var diffs []Difference
	for _, e := range top.Exchanges {
		var got struct {
			Type    string `json:"type"`
			Durable bool   `json:"durable"`
		}
		found, err := m.Get(ctx, "/api/exchanges/"+m.VHostPath()+"/"+url.PathEscape(e.Name), &got)
		if err != nil {
			return nil, err
		}
		switch {
		case !found:
			diffs = append(diffs, Difference{"exchange", e.Name, "missing", "type " + e.Type})
		case got.Type != e.Type || got.Durable != e.Durable:
			diffs = append(diffs, Difference{"exchange", e.Name, "inequivalent",
				fmt.Sprintf("type %s durable %t, want type %s durable %t", got.Type, got.Durable, e.Type, e.Durable)})
		}
	}
	for _, q := range top.Queues {
		var got struct {
			Durable   bool           `json:"durable"`
			Arguments map[string]any `json:"arguments"`
		}
		found, err := m.Get(ctx, "/api/queues/"+m.VHostPath()+"/"+url.PathEscape(q.Name), &got)
		if err != nil {
			return nil, err
		}
		if !found {
			diffs = append(diffs, Difference{"queue", q.Name, "missing", q.Role + " queue of " + q.Source})
			continue
		}
		diffs = append(diffs, compareArgs(q, got.Arguments)...)
	}
	for _, b := range top.Bindings {
		var got []struct {
			RoutingKey string `json:"routing_key"`
		}
		path := "/api/bindings/" + m.VHostPath() + "/e/" + url.PathEscape(b.Exchange) + "/q/" + url.PathEscape(b.Queue)
		if _, err := m.Get(ctx, path, &got); err != nil {
			return nil, err
		}
		ok := false
		for _, g := range got {
			ok = ok || g.RoutingKey == b.RoutingKey
		}
		if !ok {
			diffs = append(diffs, Difference{"binding", b.Queue, "missing",
				fmt.Sprintf("from exchange %q with routing key %q", b.Exchange, b.RoutingKey)})
		}
	}
	return diffs, nil
}

// compareArgs reports planned arguments that are missing or different,
// and live arguments the plan does not have.
func compareArgs(q Queue, got map[string]any) []Difference {
	var diffs []Difference
	names := make([]string, 0, len(q.Arguments))
	for k := range q.Arguments {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		want := q.Arguments[k]
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, Difference{"argument", q.Name, "missing", fmt.Sprintf("%s = %v", k, want)})
		case !sameValue(want, g):
			diffs = append(diffs, Difference{"argument", q.Name, "inequivalent", fmt.Sprintf("%s = %v, want %v", k, g, want)})
		}
	}
	extra := make([]string, 0)
	for k := range got {
		if _, ok := q.Arguments[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		diffs = append(diffs, Difference{"argument", q.Name, "unexpected", fmt.Sprintf("%s = %v", k, got[k])})
	}
	return diffs
}

// sameValue compares a planned argument with its JSON-decoded live value
// (numbers arrive as float64).
func sameValue(want, got any) bool {
	switch w := want.(type) {
	case int64:
		f, ok := got.(float64)
		return ok && f == float64(w)
	case int:
		f, ok := got.(float64)
		return ok && f == float64(w)
	case string:
		g, ok := got.(string)
		return ok && g == w
	}
	return reflect.DeepEqual(want, got) || fmt.Sprint(want) == fmt.Sprint(got)
}
