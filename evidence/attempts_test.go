package evidence

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

var attemptT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// failed is the i-th failed attempt of a message retried by the runtime.
func failed(i int, o Outcome) Attempt {
	return Attempt{At: attemptT0.Add(time.Duration(i) * time.Second), RetryCount: min(i, MaxRetryCount), DeliveryCount: 1,
		ErrorType: "*fmt.wrapError", ErrorMessage: fmt.Sprintf("attempt %d: connection refused", i), Outcome: o}
}

func TestAttemptsRoundTrip(t *testing.T) {
	var hist History
	for i := range 3 {
		hist = hist.Add(failed(i, OutcomeRetry))
	}
	hist = hist.Add(Attempt{At: attemptT0.Add(time.Hour + 1500*time.Microsecond), RetryCount: 3, DeliveryCount: 4,
		ErrorType: "*json.SyntaxError", ErrorMessage: `bad <input> "x" – ünïcode`, Outcome: OutcomeDeadLetter})
	h := map[string]any{"tenant": "acme", HeaderErrorMessage: "last"}
	hist.Apply(h)
	if len(h) != 3 || h["tenant"] != "acme" || h[HeaderErrorMessage] != "last" {
		t.Fatalf("Apply touched other headers: %v", h)
	}
	text, _ := h[HeaderAttempts].(string)
	if !strings.HasPrefix(text, `{"v":1,"attempts":[{"at":"2026-11-29T12:00:00.000Z","retry":0,"delivery":1,`) ||
		!strings.Contains(text, `bad <input>`) {
		t.Errorf("wire form %s", text)
	}
	got, err := DecodeAttempts(h)
	if err != nil {
		t.Fatal(err)
	}
	want := hist
	want.Attempts[3].At = attemptT0.Add(time.Hour + time.Millisecond) // milliseconds on the wire
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// Kafka hands the header over as bytes.
	h[HeaderAttempts] = []byte(text)
	if got, err := DecodeAttempts(h); err != nil || len(got.Attempts) != 4 {
		t.Errorf("[]byte header: %+v, %v", got, err)
	}
	History{}.Apply(h)
	if _, ok := h[HeaderAttempts]; ok {
		t.Error("an empty history left the header")
	}
	if got, err := DecodeAttempts(h); err != nil || len(got.Attempts) != 0 {
		t.Errorf("absent header: %+v, %v", got, err)
	}
}

// A message retried a thousand times keeps the first attempt and the most
// recent ten, counts the others and stays within MaxAttemptsBytes, with
// every error message at its bound.
func TestAttemptsBounded(t *testing.T) {
	var hist History
	h := map[string]any{}
	long := strings.Repeat("x", 3*MaxAttemptMessageBytes)
	for i := range 1000 {
		a := failed(i, OutcomeRetry)
		a.ErrorMessage = fmt.Sprintf("attempt %d %s", i, long)
		// Each copy decodes what the previous one carried, as the runtime does.
		prev, err := DecodeAttempts(h)
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		prev.Add(a).Apply(h)
		if n := len(h[HeaderAttempts].(string)); n > MaxAttemptsBytes {
			t.Fatalf("attempt %d: header of %d bytes, over %d", i, n, MaxAttemptsBytes)
		}
		hist = prev.Add(a)
	}
	got, err := DecodeAttempts(h)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, hist) {
		t.Fatal("the header does not decode to the history written")
	}
	n := len(got.Attempts)
	if n < 2 || n > 1+MaxRecentAttempts || got.Dropped != 1000-n {
		t.Fatalf("%d attempts kept, %d dropped; want ≤ %d kept and the rest counted", n, got.Dropped, 1+MaxRecentAttempts)
	}
	if !strings.HasPrefix(got.Attempts[0].ErrorMessage, "attempt 0 ") {
		t.Errorf("first attempt not kept: %q", got.Attempts[0].ErrorMessage)
	}
	for i, a := range got.Attempts[1:] {
		if wantPrefix := fmt.Sprintf("attempt %d ", 1000-n+1+i); !strings.HasPrefix(a.ErrorMessage, wantPrefix) {
			t.Errorf("kept attempt %d = %q, want the most recent ones in order (%q…)", i+1, a.ErrorMessage[:20], wantPrefix)
		}
		if len(a.ErrorMessage) != MaxAttemptMessageBytes || !strings.HasSuffix(a.ErrorMessage, TruncatedSuffix) {
			t.Errorf("message of %d bytes, want cut to %d", len(a.ErrorMessage), MaxAttemptMessageBytes)
		}
	}

	// Short messages: the count bound applies, first + the last ten.
	hist = History{}
	for i := range 1000 {
		hist = hist.Add(failed(i, OutcomeRetry))
	}
	if len(hist.Attempts) != 1+MaxRecentAttempts || hist.Dropped != 1000-1-MaxRecentAttempts ||
		hist.Attempts[0].ErrorMessage != "attempt 0: connection refused" || hist.Attempts[1].ErrorMessage != "attempt 990: connection refused" ||
		hist.Attempts[MaxRecentAttempts].ErrorMessage != "attempt 999: connection refused" {
		t.Errorf("count bound: %d kept, %d dropped, %+v", len(hist.Attempts), hist.Dropped, hist.Attempts)
	}
}

// Text that JSON escapes to six times its size still fits: the first and
// the last attempt are kept, their text cut further.
func TestAttemptsEscapedTextFits(t *testing.T) {
	nasty := strings.Repeat("\x01", MaxAttemptMessageBytes)
	var hist History
	for i := range 5 {
		hist = hist.Add(Attempt{At: attemptT0, ErrorType: strings.Repeat("\x02", 500), ErrorMessage: nasty, Outcome: OutcomeRetry, RetryCount: i})
	}
	h := map[string]any{}
	hist.Apply(h)
	if n := len(h[HeaderAttempts].(string)); n > MaxAttemptsBytes {
		t.Fatalf("%d bytes", n)
	}
	got, err := DecodeAttempts(h)
	if err != nil || len(got.Attempts) < 2 || got.Attempts[0].RetryCount != 0 || got.Attempts[len(got.Attempts)-1].RetryCount != 4 ||
		got.Dropped != 5-len(got.Attempts) {
		t.Fatalf("%+v, %v", got, err)
	}
	if !reflect.DeepEqual(got, hist) {
		t.Errorf("not stable: %+v vs %+v", got, hist)
	}
}

// A malformed history is ignored, named in one error, and leaves the
// record's evidence alone.
func TestAttemptsMalformed(t *testing.T) {
	for name, v := range map[string]any{
		"not text":       int32(3),
		"not json":       "retry 1 failed",
		"no version":     `{"attempts":[]}`,
		"future version": `{"v":2,"attempts":[{"at":"2026-11-29T12:00:00.000Z","retry":0,"outcome":"retry"}]}`,
		"bad time":       `{"v":1,"attempts":[{"at":"yesterday","retry":0,"outcome":"retry"}]}`,
		"retry range":    `{"v":1,"attempts":[{"at":"2026-11-29T12:00:00Z","retry":101,"outcome":"retry"}]}`,
		"negative drop":  `{"v":1,"dropped":-1,"attempts":[]}`,
		"float retry":    `{"v":1,"attempts":[{"at":"2026-11-29T12:00:00Z","retry":1.5}]}`,
		"nested table":   map[string]any{"v": int32(1)},
	} {
		t.Run(name, func(t *testing.T) {
			h := map[string]any{HeaderAttempts: v}
			fullRecord().Apply(h)
			got, err := DecodeAttempts(h)
			if !errors.Is(err, ErrInvalidHeader) || !strings.Contains(err.Error(), HeaderAttempts) || len(got.Attempts) != 0 {
				t.Fatalf("DecodeAttempts = %+v, %v", got, err)
			}
			rec, err := Decode(h)
			if err != nil || rec != fullRecord() {
				t.Errorf("the record's evidence suffered: %v", err)
			}
		})
	}
}

// Unknown fields and outcomes of a later version 1 writer are kept as far
// as they go: the outcome as text, extra fields ignored.
func TestAttemptsForwardCompatible(t *testing.T) {
	h := map[string]any{HeaderAttempts: `{"v":1,"dropped":2,"attempts":[{"at":"2026-11-29T15:00:00.5+03:00","retry":2,"delivery":3,"outcome":"crashed","host":"w1"}],"new":true}`}
	got, err := DecodeAttempts(h)
	want := History{Dropped: 2, Attempts: []Attempt{{At: time.Date(2026, 11, 29, 12, 0, 0, 500e6, time.UTC), RetryCount: 2, DeliveryCount: 3, Outcome: "crashed"}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestRecordAttempt(t *testing.T) {
	r := fullRecord()
	a := r.Attempt(OutcomeDeadLetter)
	want := Attempt{At: r.LastFailureAt, RetryCount: 3, DeliveryCount: 2, ErrorType: r.ErrorType, ErrorMessage: r.ErrorMessage, Outcome: OutcomeDeadLetter}
	if a != want {
		t.Errorf("Attempt = %+v", a)
	}
	r = Record{Reason: ReasonInvalidRetryCount, RawRetryCount: `"0" (string)`, RetryCount: 7, DeadLetteredAt: attemptT0}
	if a := r.Attempt(OutcomeDeadLetter); a.RetryCount != 0 || !a.At.Equal(attemptT0) {
		t.Errorf("Attempt of an invalid retry count = %+v", a)
	}
}

func TestRedriveRemovesReleaseKeepsAttempts(t *testing.T) {
	h := map[string]any{}
	History{}.Add(failed(0, OutcomeDeadLetter)).Apply(h)
	if _, ok := RedriveHeaders(h)[HeaderAttempts]; ok {
		t.Error("a redrive kept the attempt history")
	}
	if ReleaseHeaders(h)[HeaderAttempts] != h[HeaderAttempts] {
		t.Error("a release dropped the attempt history")
	}
}
