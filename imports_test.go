package lily_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRootImportsNoFileFormatLibrary: the runtime package imports no TOML
// library (DESIGN §3); the configuration file is package config's.
func TestRootImportsNoFileFormatLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for dep := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(strings.ToLower(dep), "toml") || strings.HasPrefix(dep, "github.com/lily-mq/lily/config") {
			t.Errorf("the root package depends on %s", dep)
		}
	}
}
