package httpapi

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
)

// TestOpenAPICoversRoutes checks that every route the server registers is
// in the served OpenAPI document and the document has no route the server
// lacks, and that every $ref of the document resolves.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	resp, err := http.Get(f.ts.URL + "/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(readAll(t, resp)), &doc); err != nil {
		t.Fatalf("/api/openapi.json is not JSON: %v", err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v", doc["openapi"])
	}
	documented := map[string]bool{}
	for path, item := range doc["paths"].(map[string]any) {
		for method := range item.(map[string]any) {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	registered := map[string]bool{}
	for _, rt := range f.srv.Routes() {
		registered[rt.Method+" "+rt.Path] = true
	}
	var missing, extra []string
	for r := range registered {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !registered[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes not in httpapi/openapi.json: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("routes in httpapi/openapi.json that the server does not register: %v", extra)
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
				var cur any = doc
				for _, p := range parts {
					m, ok := cur.(map[string]any)
					if !ok || m[p] == nil {
						t.Errorf("$ref %s does not resolve", ref)
						return
					}
					cur = m[p]
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
}
