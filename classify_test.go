package lily

import (
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// decodeErrors returns one real error of every kind the default allow-list
// names, as the standard library (and protobuf) return them.
func decodeErrors(t *testing.T) map[string]error {
	t.Helper()
	var v map[string]int
	var n any = 0 // not a pointer: *json.InvalidUnmarshalError
	var ch chan int
	out := map[string]error{
		"*json.SyntaxError":           json.Unmarshal([]byte(`{"a":`), &v),
		"*json.UnmarshalTypeError":    json.Unmarshal([]byte(`{"a":"x"}`), &v),
		"*json.InvalidUnmarshalError": json.Unmarshal([]byte(`1`), n),
		"*xml.SyntaxError":            xml.Unmarshal([]byte(`<a><b></a>`), &struct{}{}),
		"*xml.UnsupportedTypeError":   func() error { _, err := xml.Marshal(ch); return err }(),
		"xml.UnmarshalError": xml.Unmarshal([]byte(`<b/>`), &struct {
			XMLName xml.Name `xml:"a"`
		}{}),
		"*xml.TagPathError": xml.Unmarshal([]byte(`<r/>`), &struct {
			A string `xml:"x>a"`
			B string `xml:"x"`
		}{}),
		"base64.CorruptInputError":       func() error { _, err := base64.StdEncoding.DecodeString("!!!"); return err }(),
		"*strconv.NumError":              func() error { _, err := strconv.Atoi("12a"); return err }(),
		"google.golang.org/protobuf/...": proto.Unmarshal([]byte{0x0a, 0x05, 0x01}, &structpb.Struct{}),
	}
	for k, err := range out {
		if err == nil {
			t.Fatalf("%s: the call returned no error", k)
		}
	}
	return out
}

// TestDecodeErrorsPermanentByDefault: a queue with no permanent_errors
// dead-letters every decode error of the default allow-list at once, bare or
// wrapped; a queue's retry_errors takes an entry out again.
func TestDecodeErrorsPermanentByDefault(t *testing.T) {
	errs := decodeErrors(t)
	if got := DefaultPermanentErrors(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(func(yield func(string) bool) {
		for k := range errs {
			if !yield(k) {
				return
			}
		}
	})) {
		t.Fatalf("DefaultPermanentErrors %v: every entry needs a real error in this test", got)
	}
	c := QueueConfig{Name: "q"}.Classifier()
	for name, err := range errs {
		if got := c.Classify(err); got != PermanentClass {
			t.Errorf("%s (%T: %v) = %v, want permanent by default", name, err, err, got)
		}
		if got := c.Classify(fmt.Errorf("decode order 7: %w", err)); got != PermanentClass {
			t.Errorf("wrapped %s = %v, want permanent", name, got)
		}
		if got := c.Classify(errors.Join(errors.New("x"), err)); got != PermanentClass {
			t.Errorf("joined %s = %v, want permanent", name, got)
		}
		if got := c.Classify(Retryable(err)); got != Transient {
			t.Errorf("Retryable(%s) = %v, want transient", name, got)
		}
		// Removable per queue.
		rc := QueueConfig{Name: "q", RetryErrors: []string{name}}.Classifier()
		if got := rc.Classify(err); got != Transient {
			t.Errorf("retry_errors = [%q]: %v, want transient", name, got)
		}
	}
	if got := c.Classify(errors.New("connection refused")); got != Transient {
		t.Errorf("plain error = %v, want transient", got)
	}
	// Extendable per queue: permanent_errors adds to the defaults.
	own := QueueConfig{Name: "q", PermanentErrors: []string{"*lily.validationError"}}.Classifier()
	if own.Classify(&validationError{"sku"}) != PermanentClass || own.Classify(errs["*json.SyntaxError"]) != PermanentClass {
		t.Error("permanent_errors replaced the defaults instead of extending them")
	}
	// A package entry matches every error type of the package and below.
	pkg := DefaultClassifier{NoDefaults: true, PermanentTypes: []string{"github.com/lily-mq/lily/..."}}
	if pkg.Classify(&validationError{"x"}) != PermanentClass || pkg.Classify(errors.New("x")) != Transient {
		t.Error("package entry github.com/lily-mq/lily/... does not match by package path")
	}
}

// TestClassificationConfig: permanent_errors and retry_errors are checked
// at load, naming the queue, the field, the value and the fix.
func TestClassificationConfig(t *testing.T) {
	tests := []struct {
		q    QueueConfig
		want string // "" = valid
	}{
		{QueueConfig{RetryErrors: []string{"*json.SyntaxError", "google.golang.org/protobuf/..."}}, ""},
		{QueueConfig{PermanentErrors: []string{"*orders.ValidationError", "orders.Err", "example.com/x/..."}}, ""},
		{QueueConfig{RetryErrors: []string{"*orders.ValidationError"}}, `retry_errors = "*orders.ValidationError": retry_errors removes entries of the default permanent allow-list`},
		{QueueConfig{RetryErrors: []string{"*lily.PermanentError"}}, `retry_errors = "*lily.PermanentError": lily.Permanent is the handler's explicit decision`},
		{QueueConfig{PermanentErrors: []string{"SyntaxError"}}, `permanent_errors = "SyntaxError": must be a Go error type as %T prints it`},
		{QueueConfig{PermanentErrors: []string{"*json.SyntaxError"}, RetryErrors: []string{"*json.SyntaxError"}}, `permanent_errors = "*json.SyntaxError": is also listed in retry_errors`},
	}
	for _, tt := range tests {
		tt.q.Name = "orders.created"
		err := tt.q.WithDefaults().Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v", tt.q, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `queue "orders.created"`)):
			t.Errorf("%v/%v: err %v, want %q", tt.q.PermanentErrors, tt.q.RetryErrors, err, tt.want)
		}
	}
	q := QueueConfig{Name: "q", RetryErrors: []string{"*strconv.NumError"}}.WithDefaults()
	if _, e := strconv.Atoi("x"); q.Classifier().Classify(e) != Transient {
		t.Error("retry_errors not applied")
	}
}
