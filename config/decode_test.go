package config

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeErrorsNameTheKey: a value of the wrong type is reported by its
// TOML key, the queue or token it belongs to, what the key wants, what the
// file gives and the line, not by the Go struct field.
func TestDecodeErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"string for an integer", `db = "lily.db"

[[queue]]
name = "payments"

[[queue]]
name = "orders.created"
retry_attempts = "3"
`, `queue "orders.created": retry_attempts: want an integer, got the string "3" (line 8)`},
		{"float for a pointer integer", "[[queue]]\nname = \"a\"\ndelivery_limit = 1.5\n", `queue "a": delivery_limit: want an integer, got the number 1.5 (line 3)`},
		{"integer for a string", "[[queue]]\nname = 3\n", `queue 1: name: want a string, got the integer 3 (line 2)`},
		{"string for an array", "[[queue]]\nname = \"a\"\nbinding_keys = \"a.b\"\n", `queue "a": binding_keys: want an array of strings, got the string "a.b" (line 3)`},
		{"array of integers", "[[queue]]\nname = \"a\"\npermanent_errors = [1]\n", `queue "a": permanent_errors: want an array of strings, got an array holding the integer 1 (line 3)`},
		{"integer for a boolean", "[[queue]]\nname = \"a\"\nbreaker = 1\n", `queue "a": breaker: want a boolean (true or false), got the integer 1 (line 3)`},
		{"top-level key", "db = 3\n", `db: want a string, got the integer 3 (line 1)`},
		{"int32 overflow", "kafka_partitions = 99999999999\n", `kafka_partitions: want an integer in -2147483648..2147483647, got the integer 99999999999 (line 1)`},
		{"token", "[[token]]\nname = \"alice\"\nrole = 1\n", `token 1 ("alice"): role: want a string, got the integer 1 (line 3)`},
		{"table for the queue array", "queue = 3\n", `queue: want an array of tables ([[...]] entries), got the integer 3 (line 1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n  %s\nwant it to contain\n  %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "struct field") || strings.Contains(err.Error(), "lily.") {
				t.Errorf("error names the Go field: %s", err)
			}
		})
	}
}

// TestUnknownFieldSuggests: an unknown key names its queue, its line and
// the known key it is probably a misspelling of.
func TestUnknownFieldSuggests(t *testing.T) {
	_, err := ParseConfig([]byte("[[queue]]\nname = \"orders.created\"\nretry_attempt = 3\n\n[[queue]]\nname = \"b\"\nzzz = 1\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`queue "orders.created": retry_attempt: unknown field (line 3): did you mean retry_attempts?`,
		`queue "b": zzz: unknown field (line 7): the known keys are `,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
}

// TestSyntaxErrorNamesTheLine: a TOML syntax error gives line and column.
func TestSyntaxErrorNamesTheLine(t *testing.T) {
	_, err := ParseConfig([]byte("[[queue]]\nname = \"x\"\nretry_attempts = = 3\n"))
	if err == nil || !strings.Contains(err.Error(), "line 3, column") {
		t.Errorf("error = %v, want it to name line 3 and a column", err)
	}
}

// TestRabbitMQURLRefusedAtLoad: a malformed rabbitmq_url is refused by
// ParseConfig (it used to be accepted, and 'lily topology apply' then
// retried the dial for 10 s), without printing the password.
func TestRabbitMQURLRefusedAtLoad(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"localhost:5672", `scheme "localhost"`},
		{"http://guest:secret@127.0.0.1:15672/", `scheme "http"`},
		{"amqp://", "has no host"},
		{"amqp://guest:secret@127.0.0.1:99999/", `port "99999"`},
		{"amqp://guest:secret@127.0.0.1:x/", "rabbitmq_url"},
		{"amqp ://bad", "is not a URL"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := ParseConfig([]byte("rabbitmq_url = \"" + tc.url + "\"\n[[queue]]\nname = \"a\"\n"))
			if err == nil {
				t.Fatalf("rabbitmq_url = %q accepted", tc.url)
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "rabbitmq_url") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want rabbitmq_url and %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
	for _, ok := range []string{"amqp://guest:guest@127.0.0.1:5672/", "amqps://u:p@rabbit.example.com/vhost", "amqp://[::1]:5672/", "amqp://rabbit"} {
		if err := ValidateRabbitMQURL(ok); err != nil {
			t.Errorf("ValidateRabbitMQURL(%q) = %v", ok, err)
		}
	}
}

// TestDecodeErrorsInsideArraysAndInlineTables: the decoder reports line 1
// for a value nested in an array and only the table's key inside an inline
// table; the error still names the key and its line.
func TestDecodeErrorsInsideArraysAndInlineTables(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"[[queue]]\nname = \"a\"\nbinding_keys = [[\"x\"]]\n", `queue "a": binding_keys: want an array of strings, got an array holding an array (line 3)`},
		{"queue = [{name = \"a\", retry_attempts = 1}, {name = \"b\", delivery_limit = \"x\"}]\n", `delivery_limit: want an integer, got a string (line 1)`},
	} {
		_, err := ParseConfig([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error\n  %v\nwant it to contain\n  %s", tc.doc, err, tc.want)
		}
	}
}

// TestDecodeErrorOutOfRange: an integer too large for 64 bits (which no
// generic decode can read either) still names the queue and the value.
func TestDecodeErrorOutOfRange(t *testing.T) {
	_, err := ParseConfig([]byte("[[queue]]\nname = \"orders.created\"\nretry_attempts = 99999999999999999999 # many\n"))
	want := `queue "orders.created": retry_attempts: want an integer, got the integer 99999999999999999999, which is out of range (line 3)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error\n  %v\nwant\n  %s", err, want)
	}
}

// TestRabbitMQManagementURL: rabbitmq_management_url is read, and one that
// is not an http(s) URL is refused naming the key and the fix.
func TestRabbitMQManagementURL(t *testing.T) {
	c, err := ParseConfig([]byte("rabbitmq_management_url = \"https://rabbit.internal:15671\"\n[[queue]]\nname = \"a\"\n"))
	if err != nil || c.RabbitMQManagementURL != "https://rabbit.internal:15671" {
		t.Fatalf("ParseConfig: %+v, %v", c.RabbitMQManagementURL, err)
	}
	_, err = ParseConfig([]byte("rabbitmq_management_url = \"rabbit.internal:15672\"\n[[queue]]\nname = \"a\"\n"))
	if err == nil || !strings.Contains(err.Error(), "rabbitmq_management_url") || !strings.Contains(err.Error(), "http://") {
		t.Errorf("a management URL without a scheme: %v, want refused naming the key and the fix", err)
	}
}
