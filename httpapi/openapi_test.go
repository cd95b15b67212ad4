package httpapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lily-mq/lily/redrive"
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

// TestOpenAPISchemasMatchTheCode checks that the documented redrive schemas
// have exactly the JSON fields the server reads and writes, and that the
// Job state enum lists every job state of the catalog.
func TestOpenAPISchemasMatchTheCode(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapiJSON, &doc); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"Job": jobJSON{}, "RedriveRequest": redriveRequest{}, "DryRun": dryRunAnswer{},
		"Timeline": timelineJSON{}, "TimelineSeries": timelineSeries{}} {
		var fields []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			if tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
				fields = append(fields, tag)
			}
		}
		var documented []string
		for p := range doc.Components.Schemas[name].Properties {
			documented = append(documented, p)
		}
		sort.Strings(fields)
		sort.Strings(documented)
		if strings.Join(fields, " ") != strings.Join(documented, " ") {
			t.Errorf("schema %s documents %v; the code has %v", name, documented, fields)
		}
	}
	states := doc.Components.Schemas["Job"].Properties["state"].Enum
	for _, st := range []redrive.JobState{redrive.JobQueued, redrive.JobRunning, redrive.JobSampling, redrive.JobDone,
		redrive.JobStopped, redrive.JobFailed, redrive.JobCancelled} {
		if !slices.Contains(states, string(st)) {
			t.Errorf("Job state enum %v lacks %s", states, st)
		}
	}
}
