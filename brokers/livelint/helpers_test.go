package livelint

import (
	"testing"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
)

// parse returns the configuration of toml, failing the test if invalid.
func parse(t *testing.T, toml string) config.Config {
	t.Helper()
	c, err := config.ParseConfig([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// codes returns the codes of fs, with their severities: "error dlx-missing".
func codes(fs []lint.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Severity)+" "+f.Code)
	}
	return out
}
