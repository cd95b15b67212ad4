package lily

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
)

func TestOutcomeWrappersNil(t *testing.T) {
	if err := Permanent(nil); err != nil {
		t.Errorf("Permanent(nil) = %#v, want nil", err)
	}
	if err := Retryable(nil); err != nil {
		t.Errorf("Retryable(nil) = %#v, want nil", err)
	}
}

func TestOutcomeWrappersErrorsAs(t *testing.T) {
	cause := errors.New("bad payload")

	perm := fmt.Errorf("handle order 42: %w", Permanent(cause))
	var pe *PermanentError
	if !errors.As(perm, &pe) {
		t.Fatalf("errors.As(%v, *PermanentError) failed", perm)
	}
	if pe.Err != cause || pe.Unwrap() != cause {
		t.Errorf("PermanentError.Err = %v, want the cause", pe.Err)
	}
	if !errors.Is(perm, cause) {
		t.Error("errors.Is through Permanent failed")
	}
	if got, want := perm.Error(), "handle order 42: permanent: bad payload"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var re *RetryableError
	if errors.As(perm, &re) {
		t.Error("a permanent error is also a RetryableError")
	}

	retr := fmt.Errorf("call inventory: %w", Retryable(cause))
	if !errors.As(retr, &re) {
		t.Fatalf("errors.As(%v, *RetryableError) failed", retr)
	}
	if re.Err != cause || re.Unwrap() != cause {
		t.Errorf("RetryableError.Err = %v, want the cause", re.Err)
	}
	if got, want := retr.Error(), "call inventory: retryable: bad payload"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(retr, cause) {
		t.Error("errors.Is through Retryable failed")
	}
}

// validationError is an application error type for the allow-list.
type validationError struct{ field string }

func (e *validationError) Error() string { return "invalid " + e.field }

// valueError has a value receiver, so %T is without the star.
type valueError struct{}

func (valueError) Error() string { return "value error" }

var errBadInput = errors.New("bad input")

func syntaxError() error {
	var v any
	err := json.Unmarshal([]byte(`{"a":`), &v)
	if err == nil {
		panic("json accepted a truncated document")
	}
	return err
}

func TestDefaultClassifier(t *testing.T) {
	c := DefaultClassifier{
		PermanentTypes:  []string{"*json.SyntaxError", "*lily.validationError", "lily.valueError"},
		PermanentErrors: []error{errBadInput, io.ErrUnexpectedEOF},
	}
	plain := errors.New("connection refused")
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"plain", plain, Transient},
		{"wrapped plain", fmt.Errorf("x: %w", plain), Transient},
		{"context deadline", context.DeadlineExceeded, Transient},
		{"permanent", Permanent(plain), PermanentClass},
		{"wrapped permanent", fmt.Errorf("a: %w", fmt.Errorf("b: %w", Permanent(plain))), PermanentClass},
		{"retryable", Retryable(plain), Transient},
		{"retryable outer wins over permanent", Retryable(Permanent(plain)), Transient},
		{"wrapped retryable outer wins", fmt.Errorf("ctx: %w", Retryable(fmt.Errorf("inner: %w", Permanent(plain)))), Transient},
		{"permanent outer wins over retryable", Permanent(Retryable(plain)), PermanentClass},
		{"allow-listed type", syntaxError(), PermanentClass},
		{"allow-listed type wrapped", fmt.Errorf("decode order: %w", fmt.Errorf("body: %w", syntaxError())), PermanentClass},
		{"allow-listed own type", fmt.Errorf("check: %w", &validationError{"sku"}), PermanentClass},
		{"allow-listed value type", fmt.Errorf("check: %w", valueError{}), PermanentClass},
		{"retryable overrides allow-list", Retryable(fmt.Errorf("decode: %w", syntaxError())), Transient},
		{"retryable overrides sentinel", Retryable(errBadInput), Transient},
		{"default-listed json error", &json.UnmarshalTypeError{Value: "string", Type: nil}, PermanentClass},
		{"sentinel", errBadInput, PermanentClass},
		{"sentinel wrapped", fmt.Errorf("order 7: %w", errBadInput), PermanentClass},
		{"sentinel stdlib", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), PermanentClass},
		{"sentinel text only", errors.New("bad input"), Transient},
		{"join with permanent", errors.Join(plain, Permanent(errors.New("x"))), PermanentClass},
		{"join with allow-listed type", errors.Join(plain, fmt.Errorf("d: %w", syntaxError())), PermanentClass},
		{"join with sentinel", errors.Join(plain, errBadInput), PermanentClass},
		{"join of transients", errors.Join(plain, io.EOF), Transient},
		{"join retryable first", errors.Join(Retryable(plain), Permanent(plain)), Transient},
		{"multi %w with sentinel", fmt.Errorf("%w and %w", plain, errBadInput), PermanentClass},
		{"timeout wrapper", &TimeoutError{Err: context.DeadlineExceeded}, Transient},
		{"panic", &PanicError{Value: "boom"}, Transient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestDefaultClassifierZeroValue(t *testing.T) {
	var c DefaultClassifier
	if got := c.Classify(syntaxError()); got != PermanentClass {
		t.Errorf("zero classifier: syntax error = %v, want PermanentClass (the default allow-list)", got)
	}
	if got := (DefaultClassifier{NoDefaults: true}).Classify(syntaxError()); got != Transient {
		t.Errorf("NoDefaults: syntax error = %v, want Transient", got)
	}
	if got := c.Classify(Permanent(syntaxError())); got != PermanentClass {
		t.Errorf("zero classifier: Permanent = %v, want PermanentClass", got)
	}
}

func TestClassifierFunc(t *testing.T) {
	var got error
	f := ClassifierFunc(func(err error) Class { got = err; return PermanentClass })
	e := errors.New("x")
	if f.Classify(e) != PermanentClass || got != e {
		t.Error("ClassifierFunc did not call its function")
	}
}

// customWrapper is an application wrapper: it names the evidence type.
type customWrapper struct{ err error }

func (e *customWrapper) Error() string { return "custom: " + e.err.Error() }
func (e *customWrapper) Unwrap() error { return e.err }

func TestCauseType(t *testing.T) {
	numErr := func() error { _, err := strconv.Atoi("x"); return err }()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"plain", errors.New("x"), "*errors.errorString"},
		{"fmt without %w", fmt.Errorf("no wrap %d", 1), "*errors.errorString"},
		{"fmt wrapper skipped", fmt.Errorf("decode: %w", syntaxError()), "*json.SyntaxError"},
		{"nested fmt wrappers", fmt.Errorf("a: %w", fmt.Errorf("b: %w", numErr)), "*strconv.NumError"},
		{"multi %w skipped", fmt.Errorf("%w; %w", &validationError{"a"}, io.EOF), "*lily.validationError"},
		{"permanent skipped", Permanent(syntaxError()), "*json.SyntaxError"},
		{"retryable skipped", Retryable(fmt.Errorf("call: %w", &validationError{"b"})), "*lily.validationError"},
		{"all wrappers", fmt.Errorf("h: %w", Permanent(fmt.Errorf("d: %w", Retryable(numErr)))), "*strconv.NumError"},
		{"value receiver", Permanent(valueError{}), "lily.valueError"},
		{"custom wrapper is named", Permanent(&customWrapper{errors.New("x")}), "*lily.customWrapper"},
		{"timeout", &TimeoutError{Err: context.DeadlineExceeded}, "*lily.TimeoutError"},
		{"panic", &PanicError{Value: 1}, "*lily.PanicError"},
		{"bare permanent of a nil-wrapping fmt error", Permanent(fmt.Errorf("x: %w", nil)), "*lily.PermanentError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := causeType(tt.err); got != tt.want {
				t.Errorf("causeType(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestChainVisitsJoinDepthFirstAndStops(t *testing.T) {
	a, b, c := errors.New("a"), errors.New("b"), errors.New("c")
	err := errors.Join(fmt.Errorf("wa: %w", a), errors.Join(b, c))
	var got []string
	for e := range chain(err) {
		got = append(got, e.Error())
	}
	want := []string{"wa: a\nb\nc", "wa: a", "a", "b\nc", "b", "c"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("chain = %q, want %q", got, want)
	}
	n := 0
	for range chain(err) {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("break after 3 visited %d", n)
	}
}

func TestTimeoutAndPanicErrors(t *testing.T) {
	te := &TimeoutError{Timeout: 1500000000, Err: context.DeadlineExceeded}
	if !errors.Is(te, context.DeadlineExceeded) {
		t.Error("TimeoutError does not unwrap to its cause")
	}
	if got, want := te.Error(), "handler timed out after 1.5s: context deadline exceeded"; got != want {
		t.Errorf("TimeoutError = %q, want %q", got, want)
	}
	if got, want := (&PanicError{Value: "boom"}).Error(), "handler panic: boom"; got != want {
		t.Errorf("PanicError = %q, want %q", got, want)
	}
}
