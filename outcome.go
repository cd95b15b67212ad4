package lily

import (
	"errors"
	"fmt"
	"slices"
)

// PermanentError marks a failure that no retry can fix (bad data, schema or
// validation errors): the message is dead-lettered at once with reason
// "permanent". Create it with Permanent; detect it with errors.As.
type PermanentError struct {
	Err error
}

// Permanent wraps err so that the consumer dead-letters the message without
// retrying. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryableError marks a failure as transient explicitly: the message is
// retried through the delay buckets while retries are left. Any error that
// is not permanent is treated so; the wrapper documents intent and
// overrides the queue's permanent allow-list.
type RetryableError struct {
	Err error
}

// Retryable wraps err as a transient failure. Retryable(nil) returns nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

func (e *RetryableError) Error() string { return "retryable: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *RetryableError) Unwrap() error { return e.Err }

// Class is the classification of a handler error.
type Class int

// The error classes.
const (
	// Transient failures are retried while retries are left.
	Transient Class = iota
	// PermanentClass failures are dead-lettered at once.
	PermanentClass
)

// Classifier decides whether a handler error is permanent or transient.
type Classifier interface {
	Classify(err error) Class
}

// ClassifierFunc adapts a function to Classifier.
type ClassifierFunc func(err error) Class

// Classify calls f.
func (f ClassifierFunc) Classify(err error) Class { return f(err) }

// DefaultClassifier classifies by outcome wrappers first (RetryableError
// wins over PermanentError when both are in the chain, as the outermost
// explicit decision), then by the permanent allow-list, matched against
// every error in the wrapped chain (errors.Unwrap, errors.Join and
// multi-%w, as errors.As walks it), then by sentinel errors matched with
// errors.Is.
//
// The allow-list is DefaultPermanentErrors (decode, schema and validation
// errors, which no retry can fix: 000_*, 002_*) minus RetryTypes, plus
// PermanentTypes; NoDefaults drops the defaults. So the zero
// DefaultClassifier dead-letters a *json.SyntaxError at once. Each entry is
// either a Go type name as printed by %T ("*json.SyntaxError",
// "base64.CorruptInputError") or a package path followed by "/..."
// ("google.golang.org/protobuf/...") matching every error type declared in
// that package or below it — which is how protobuf decode errors are
// matched without importing protobuf.
type DefaultClassifier struct {
	// PermanentTypes are further permanent entries (permanent_errors).
	PermanentTypes []string
	// RetryTypes are entries of DefaultPermanentErrors that are to be
	// retried instead (retry_errors).
	RetryTypes []string
	// NoDefaults drops DefaultPermanentErrors: only PermanentTypes and
	// PermanentErrors (and lily.Permanent) are permanent.
	NoDefaults bool
	// PermanentErrors are sentinel errors that are permanent.
	PermanentErrors []error
}

// Classify implements Classifier.
func (c DefaultClassifier) Classify(err error) Class {
	list := c.allowList()
	for e := range chain(err) {
		switch e.(type) {
		case *RetryableError:
			return Transient
		case *PermanentError:
			return PermanentClass
		}
		if matchesAny(list, e) {
			return PermanentClass
		}
	}
	for _, s := range c.PermanentErrors {
		if errors.Is(err, s) {
			return PermanentClass
		}
	}
	return Transient
}

// allowList returns the entries in effect.
func (c DefaultClassifier) allowList() []string {
	var out []string
	if !c.NoDefaults {
		for _, d := range defaultPermanentErrors {
			if !slices.Contains(c.RetryTypes, d) {
				out = append(out, d)
			}
		}
	}
	return append(out, c.PermanentTypes...)
}

// chain yields err and every error it wraps, depth first (errors.Join and
// multi-%w included).
func chain(err error) func(yield func(error) bool) {
	return func(yield func(error) bool) {
		var walk func(error) bool
		walk = func(e error) bool {
			if e == nil {
				return true
			}
			if !yield(e) {
				return false
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				return walk(u.Unwrap())
			case interface{ Unwrap() []error }:
				for _, x := range u.Unwrap() {
					if !walk(x) {
						return false
					}
				}
			}
			return true
		}
		walk(err)
	}
}

// causeType is the %T of the first error in the chain that is not one of
// Lily's outcome wrappers or a plain fmt wrapper: what the evidence names as
// the error type.
func causeType(err error) string {
	for e := range chain(err) {
		switch e.(type) {
		case *PermanentError, *RetryableError:
			continue
		}
		t := fmt.Sprintf("%T", e)
		if t == "*fmt.wrapError" || t == "*fmt.wrapErrors" {
			continue
		}
		return t
	}
	return fmt.Sprintf("%T", err)
}
