package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfigTokens(t *testing.T) {
	c, err := ParseConfig([]byte(`
[[token]]
name = "alice"
role = "operator"
secret_env = "LILY_TOKEN_ALICE"

[[token]]
name = "viewer-1"
role = "viewer"
secret = "0123456789abcdef0123"
show_bodies = true
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tokens) != 2 || c.Tokens[0].SecretEnv != "LILY_TOKEN_ALICE" || !c.Tokens[1].ShowBodies {
		t.Fatalf("tokens = %+v", c.Tokens)
	}
	env := map[string]string{"LILY_TOKEN_ALICE": "s3cret-s3cret-s3cret"}
	if s, err := c.Tokens[0].ResolveSecret(func(k string) string { return env[k] }); err != nil || s != env["LILY_TOKEN_ALICE"] {
		t.Errorf("ResolveSecret = %q, %v", s, err)
	}
	_, err = c.Tokens[0].ResolveSecret(func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "LILY_TOKEN_ALICE") || !strings.Contains(err.Error(), "unset or empty") {
		t.Errorf("unset secret_env: %v", err)
	}
	if s, _ := c.Tokens[1].ResolveSecret(nil); s != "0123456789abcdef0123" {
		t.Errorf("literal secret = %q", s)
	}
}

func TestValidateTokens(t *testing.T) {
	_, err := ParseConfig([]byte(`
[[token]]
name = "alice"
role = "root"
secret = "0123456789abcdef"

[[token]]
name = "alice"
role = "viewer"

[[token]]
name = "bad name"
role = "admin"
secret = "short"
secret_env = "X"

[[token]]
name = "bob"
role = "admin"
secret = "short"
`))
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{
		`role = "root": must be "viewer", "operator" or "admin"`,
		`name = "alice": is used by another [[token]]`,
		`token 2 ("alice"): secret = "": is empty: set secret_env = "LILY_TOKEN_ALICE"`,
		`name = "bad name": must be 1..64 characters`,
		`token 3 ("bad name"): secret = (set): give secret or secret_env, not both`,
		`token 4 ("bob"): secret = (5 characters): must be at least 16 characters`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}
