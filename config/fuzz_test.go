package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseConfig feeds arbitrary documents to ParseConfig (decoding,
// defaults and Validate): no input panics, every refusal wraps
// ErrInvalidConfig and each of its lines names a TOML key or a line, and
// every accepted configuration validates again and yields its queues'
// specs. The corpus is testdata/fuzz/FuzzParseConfig (real
// configurations, valid and not) plus examples/*.toml.
func FuzzParseConfig(f *testing.F) {
	examples, err := filepath.Glob("../examples/*.toml")
	if err != nil || len(examples) == 0 {
		f.Fatalf("no seed configurations in ../examples: %v", err)
	}
	for _, p := range examples {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(fullConfig))
	keys := knownKeys()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("refusal does not wrap ErrInvalidConfig: %v", err)
			}
			for line := range strings.SplitSeq(err.Error(), "\n") {
				if !namesKey(line, keys) {
					t.Fatalf("a refusal names no key and no line: %q\nin\n%s", line, err)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("an accepted configuration does not validate again: %v", err)
		}
		if again := c.WithDefaults(); len(again.Queues) != len(c.Queues) {
			t.Fatalf("WithDefaults changed the queues")
		}
		for _, q := range c.Queues {
			s := q.Spec()
			if s.Name != q.Name || s.DeliveryLimit < 1 {
				t.Fatalf("queue %q: spec %+v", q.Name, s)
			}
		}
	})
}

// namesKey reports whether an error line names one of the keys (as a
// word) or a line of the file.
func namesKey(msg string, keys []string) bool {
	if strings.Contains(msg, "line ") {
		return true
	}
	for _, k := range keys {
		for i := strings.Index(msg, k); i >= 0; {
			end := i + len(k)
			before := i == 0 || !isKeyChar(msg[i-1])
			after := end == len(msg) || !isKeyChar(msg[end])
			if before && after {
				return true
			}
			j := strings.Index(msg[i+1:], k)
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	return false
}

// isKeyChar reports whether b may be part of a TOML key name.
func isKeyChar(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9'
}

// TestNamesKey pins the fuzz target's key check.
func TestNamesKey(t *testing.T) {
	keys := knownKeys()
	for msg, want := range map[string]bool{
		`invalid configuration: queue "a": delivery_limit = 0: must be in 1..1000`: true,
		"invalid configuration: line 3, column 2: expected a key":                  true,
		"invalid configuration: something went wrong":                              false,
		"invalid configuration: retry_attemptsx = 3":                               false,
	} {
		if got := namesKey(msg, keys); got != want {
			t.Errorf("namesKey(%q) = %v, want %v", msg, got, want)
		}
	}
	for _, k := range []string{"retry_attempts", "delivery_limit", "kafka_partitions", "secret_env", "rabbitmq_url", "queue", "token"} {
		found := false
		for _, have := range keys {
			found = found || have == k
		}
		if !found {
			t.Errorf("knownKeys lacks %s", k)
		}
	}
}
