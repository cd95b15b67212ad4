package config

import (
	"fmt"
	"regexp"
	"strings"
)

// Roles of the HTTP API's tokens ('lily serve'), each allowed what the one
// before it is.
const (
	// RoleViewer reads: queues, entries (bodies masked unless the token's
	// show_bodies is set), groups, the audit log, metrics.
	RoleViewer = "viewer"
	// RoleOperator also redrives, discards and unparks.
	RoleOperator = "operator"
	// RoleAdmin also erases and expires (retention).
	RoleAdmin = "admin"
)

// MinTokenSecret is the shortest token secret accepted.
const MinTokenSecret = 16

// TokenConfig is one [[token]] entry: a named credential of the HTTP API
// and console. The name is the actor of every audit record its requests
// write.
type TokenConfig struct {
	// Name identifies the token's holder, e.g. "alice" or "ci-redrive".
	// Required.
	Name string `toml:"name" json:"name"`
	// Role is "viewer", "operator" or "admin". Required.
	Role string `toml:"role" json:"role"`
	// Secret is the bearer secret itself, at least 16 characters. Give
	// Secret or SecretEnv, not both. Defaults to none.
	Secret string `toml:"secret" json:"-"`
	// SecretEnv names the environment variable that holds the secret, so
	// that the file needs none. Defaults to none.
	SecretEnv string `toml:"secret_env" json:"secret_env,omitempty"`
	// ShowBodies lets a viewer see message bodies (operators and admins
	// always do). Defaults to false: bodies are masked.
	ShowBodies bool `toml:"show_bodies" json:"show_bodies,omitempty"`
	// EditQueues are the queues whose dead letters the token may edit
	// ('lily dlq edit': a new body version, redriven with the change):
	// queue names, or "*" for every queue. Only an operator or admin
	// token may have it; the role alone never allows an edit. Defaults to
	// none: no edits.
	EditQueues []string `toml:"edit_queues" json:"edit_queues,omitempty"`
}

// CanEdit reports whether the token may edit the dead letters of queue.
func (t TokenConfig) CanEdit(queue string) bool { return EditAllowed(t.EditQueues, queue) }

// EditAllowed reports whether an edit_queues list allows queue.
func EditAllowed(editQueues []string, queue string) bool {
	for _, q := range editQueues {
		if q == "*" || q == queue {
			return true
		}
	}
	return false
}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// ValidRole reports whether r is one of the roles.
func ValidRole(r string) bool {
	return r == RoleViewer || r == RoleOperator || r == RoleAdmin
}

// validateTokens reports every problem of the [[token]] entries.
func (c Config) validateTokens() []error {
	var errs []error
	seen := map[string]bool{}
	for i, t := range c.Tokens {
		bad := func(field string, value any, rule string) {
			errs = append(errs, fmt.Errorf("%w: token %d (%q): %s = %v: %s", ErrInvalidConfig, i+1, t.Name, field, value, rule))
		}
		if !tokenName.MatchString(t.Name) {
			bad("name", fmt.Sprintf("%q", t.Name), "must be 1..64 characters of letters, digits, '.', '_', '@' or '-' (it is the actor in the audit log)")
		}
		if seen[t.Name] {
			bad("name", fmt.Sprintf("%q", t.Name), "is used by another [[token]]: names must be unique")
		}
		seen[t.Name] = true
		if !ValidRole(t.Role) {
			bad("role", fmt.Sprintf("%q", t.Role), `must be "viewer", "operator" or "admin"`)
		}
		if len(t.EditQueues) > 0 && t.Role != RoleOperator && t.Role != RoleAdmin {
			bad("edit_queues", fmt.Sprintf("%q", t.EditQueues), fmt.Sprintf("role %q cannot edit: give edit_queues to an operator or admin token only", t.Role))
		}
		for _, q := range t.EditQueues {
			if _, ok := c.Queue(q); q == "" || (q != "*" && !ok && len(c.Queues) > 0) {
				bad("edit_queues", fmt.Sprintf("%q", q), `must name a [[queue]] of this file, or be "*" for every queue`)
			}
		}
		switch {
		case t.Secret != "" && t.SecretEnv != "":
			bad("secret", "(set)", "give secret or secret_env, not both")
		case t.Secret == "" && t.SecretEnv == "":
			bad("secret", `""`, `is empty: set secret_env = "LILY_TOKEN_`+strings.ToUpper(strings.NewReplacer(".", "_", "-", "_", "@", "_").Replace(t.Name))+`" (the variable holding it) or secret`)
		case t.Secret != "" && len(t.Secret) < MinTokenSecret:
			bad("secret", fmt.Sprintf("(%d characters)", len(t.Secret)), fmt.Sprintf("must be at least %d characters (e.g. 'openssl rand -hex 16')", MinTokenSecret))
		}
	}
	return errs
}

// ResolveSecret returns the token's secret: Secret, or the value of the
// environment variable SecretEnv read with getenv. An unset, empty or too
// short variable is an error naming it.
func (t TokenConfig) ResolveSecret(getenv func(string) string) (string, error) {
	if t.SecretEnv == "" {
		return t.Secret, nil
	}
	v := getenv(t.SecretEnv)
	switch {
	case v == "":
		return "", fmt.Errorf("%w: token %q: secret_env = %q: the variable is unset or empty; export it with the secret (e.g. export %s=\"$(openssl rand -hex 16)\")",
			ErrInvalidConfig, t.Name, t.SecretEnv, t.SecretEnv)
	case len(v) < MinTokenSecret:
		return "", fmt.Errorf("%w: token %q: secret_env = %q: the secret has %d characters, want at least %d",
			ErrInvalidConfig, t.Name, t.SecretEnv, len(v), MinTokenSecret)
	}
	return v, nil
}
