package lily

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// defaultPermanentErrors is the shipped permanent allow-list (see
// DefaultPermanentErrors).
var defaultPermanentErrors = []string{
	// encoding/json
	"*json.SyntaxError",
	"*json.UnmarshalTypeError",
	"*json.InvalidUnmarshalError",
	// encoding/xml
	"*xml.SyntaxError",
	"*xml.UnsupportedTypeError",
	"xml.UnmarshalError",
	"*xml.TagPathError",
	// encoding/base64
	"base64.CorruptInputError",
	// strconv
	"*strconv.NumError",
	// google.golang.org/protobuf: proto.Unmarshal, protojson and prototext
	// return errors of google.golang.org/protobuf/internal/errors (all
	// satisfy errors.Is(err, proto.Error)); matched by package path so
	// that Lily does not import protobuf.
	"google.golang.org/protobuf/...",
}

// DefaultPermanentErrors returns the permanent allow-list every queue has
// unless it removes entries with retry_errors (QueueConfig.RetryErrors):
// decode, schema and validation errors, which no retry can fix, go straight
// to the dead-letter destination with reason "permanent" (000_*, 002_*):
//
//	*json.SyntaxError, *json.UnmarshalTypeError, *json.InvalidUnmarshalError
//	*xml.SyntaxError, *xml.UnsupportedTypeError, xml.UnmarshalError, *xml.TagPathError
//	base64.CorruptInputError
//	*strconv.NumError
//	google.golang.org/protobuf/...   (proto.Unmarshal, protojson, prototext)
//
// lily.Permanent(err) is always permanent and is not an entry of the list:
// it is the handler's explicit decision (return lily.Retryable(err) to
// retry instead). A name such as "*json.SyntaxError" matches the %T name,
// so it also matches same-named types of drop-in packages (goccy/go-json,
// json-iterator). A decode error that reaches the handler as a plain
// sentinel — io.ErrUnexpectedEOF from a streaming json.Decoder — is not
// listed, as the same sentinel comes from a broken network read; list it
// with ConsumerOptions.Classifier if a handler's input makes it permanent.
// The result is a copy.
func DefaultPermanentErrors() []string { return slices.Clone(defaultPermanentErrors) }

// Classifier returns the queue's DefaultClassifier: DefaultPermanentErrors
// minus retry_errors, plus permanent_errors. It is what a Consumer uses
// unless ConsumerOptions.Classifier is set.
func (c QueueConfig) Classifier() DefaultClassifier {
	return DefaultClassifier{PermanentTypes: c.PermanentErrors, RetryTypes: c.RetryErrors}
}

// matchesAny reports whether e matches an allow-list entry.
func matchesAny(list []string, e error) bool {
	if len(list) == 0 {
		return false
	}
	name := fmt.Sprintf("%T", e)
	var pkg string
	for _, entry := range list {
		if entry == name {
			return true
		}
		if prefix, ok := strings.CutSuffix(entry, "/..."); ok {
			if pkg == "" {
				pkg = pkgPath(e)
			}
			if pkg != "" && (pkg == prefix || strings.HasPrefix(pkg, prefix+"/")) {
				return true
			}
		}
	}
	return false
}

// pkgPath returns the import path of the package that declares e's type
// (through one pointer), or "" for an unnamed type.
func pkgPath(e error) string {
	t := reflect.TypeOf(e)
	if t.Kind() == reflect.Pointer && t.Name() == "" {
		t = t.Elem()
	}
	return t.PkgPath()
}

var (
	// typeNameEntry is a %T name: an optional '*', a package name, a dot and
	// a type name (with optional type arguments).
	typeNameEntry = regexp.MustCompile(`^\*?[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*(\[.*\])?$`)
	// packageEntry is an import path followed by "/...".
	packageEntry = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._~-]*(/[A-Za-z0-9._~-]+)*/\.\.\.$`)
)

// validateClassification checks permanent_errors and retry_errors.
func (c QueueConfig) validateClassification() []error {
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, fmt.Errorf("%w: queue %q: %s = %q: %s", ErrInvalidConfig, c.Name, field, value, rule))
	}
	for _, p := range c.PermanentErrors {
		if !typeNameEntry.MatchString(p) && !packageEntry.MatchString(p) {
			bad("permanent_errors", p, `must be a Go error type as %T prints it, e.g. "*json.SyntaxError" or "orders.ValidationError", `+
				`or an import path followed by "/..." for every error type of a package, e.g. "google.golang.org/protobuf/..."`)
		}
		if slices.Contains(c.RetryErrors, p) {
			bad("permanent_errors", p, "is also listed in retry_errors: list it in one of the two")
		}
	}
	for _, r := range c.RetryErrors {
		switch {
		case r == "*lily.PermanentError":
			bad("retry_errors", r, "lily.Permanent is the handler's explicit decision and always dead-letters; return lily.Retryable(err) to retry instead")
		case !slices.Contains(defaultPermanentErrors, r):
			bad("retry_errors", r, "retry_errors removes entries of the default permanent allow-list, and this is not one of them: "+
				strings.Join(defaultPermanentErrors, ", ")+" (an error not in the allow-list is retried already)")
		}
	}
	return errs
}
