package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProgressCountOnTerminalOnly: a running count is drawn in place (a
// carriage return, no newline until finish) when the output is a
// terminal, and nothing at all otherwise — a pipe, a file, --json — so
// that scripts read only the result.
func TestProgressCountOnTerminalOnly(t *testing.T) {
	t.Parallel()
	var term bytes.Buffer
	on := &progressBar{w: &term, on: true}
	on.count("imported lines", 200, "200 added, 0 duplicates")
	on.last = time.Time{} // the next report is due (they are drawn 100 ms apart at most)
	on.count("imported lines", 400, "390 added, 10 duplicates")
	on.finish()
	out := term.String()
	if !strings.HasPrefix(out, "\rimported lines 200 (200 added, 0 duplicates) ") || !strings.Contains(out, "\rimported lines 400 (390 added, 10 duplicates) ") ||
		strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Errorf("terminal output %q", out)
	}
	var pipe bytes.Buffer
	off := newProgressBar(&pipe) // a buffer is not a terminal
	off.count("exported", 200, "")
	off.finish()
	if pipe.Len() != 0 {
		t.Errorf("progress written to a non-terminal: %q", pipe.String())
	}
	// Through the CLI, stderr is not a terminal: the export prints only
	// its result.
	db := seedDLQ(t)
	code, _, errOut := run(t, "dlq", "export", "--db", db, "--out", filepath.Join(t.TempDir(), "x.ndjson"))
	if code != 0 || strings.Contains(errOut, "\r") {
		t.Errorf("export: exit %d, stderr %q", code, errOut)
	}
}
