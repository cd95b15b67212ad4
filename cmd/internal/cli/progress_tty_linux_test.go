package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/lily-mq/lily/internal/sqlitedb"
)

// openPTY opens a pseudo-terminal: what is written to tty (a terminal to
// isatty, as an operator's stderr is) is read from master. The test's
// cleanup closes both.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v (the test needs /dev/ptmx and devpts)", err)
	}
	t.Cleanup(func() { master.Close() })
	var n uint32
	unlock := int32(0)
	rc, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		if _, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno == 0 {
			_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock)))
		}
	}); err != nil || errno != 0 {
		t.Fatalf("pseudo-terminal ioctl: %v %v", err, errno)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal's /dev/pts/%d: %v", n, err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// runOnTerminal runs lily in-process with stderr on a pseudo-terminal, and
// stdout on it too when stdoutTTY (else in a buffer). It returns the exit
// code, stdout (when buffered) and what the terminal received.
func runOnTerminal(t *testing.T, stdoutTTY bool, args ...string) (int, string, string) {
	t.Helper()
	master, tty := openPTY(t)
	var term bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		io.Copy(&term, master) // until the terminal is closed (EIO)
	}()
	var out bytes.Buffer
	var stdout io.Writer = &out
	if stdoutTTY {
		stdout = tty
	}
	code := Run(context.Background(), args, stdout, tty)
	tty.Close()
	<-read
	return code, out.String(), term.String()
}

// TestDecisionProgressOnTerminal: discard, erase and expire draw a running
// count on stderr when it is a terminal and their entry lines go to a file
// or pipe; with --json, or when the entry lines go to the terminal
// themselves, the terminal gets no count.
func TestDecisionProgressOnTerminal(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	cfg := writeConfig(t, fmt.Sprintf("db = %q\n[[queue]]\nname = %q\ndlq_retention_hours = 1\n", db, dlqQueue))
	sqlDB, err := sqlitedb.Open(context.Background(), db, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Older than the retention, so that expire has entries to expire.
	if _, err := sqlDB.Exec(`UPDATE lily_dlq_entries SET dead_lettered_at = dead_lettered_at - 7200000`); err != nil {
		t.Fatal(err)
	}
	sqlDB.Close()
	for _, c := range []struct {
		verb string
		args []string
	}{
		{"erased", []string{"dlq", "erase", "--db", db, "--key", "cust-1", "--reason", "request 7"}},       // entries 1 and 3
		{"discarded", []string{"dlq", "discard", "--db", db, "--key", "cust-2", "--reason", "bad schema"}}, // entry 2
		{"expired", []string{"dlq", "expire", "--config", cfg}},                                            // entries 4 to 6
	} {
		// --json, as a dry run so that the real run below still has
		// entries: the JSON object alone, nothing on the terminal.
		code, out, term := runOnTerminal(t, false, append(c.args, "--dry-run", "--json")...)
		var d decideJSON
		mustJSON(t, out, &d)
		if code != 0 || d.Count == 0 || term != "" {
			t.Errorf("%s --json: exit %d, count %d, terminal %q", c.args[1], code, d.Count, term)
		}
		// Entry lines on the terminal: no count drawn over them.
		code, _, term = runOnTerminal(t, true, append(c.args, "--dry-run")...)
		if code != 0 || !strings.Contains(term, "would be "+c.verb) || strings.Contains(term, "\rwould be") {
			t.Errorf("%s --dry-run on a terminal: exit %d, terminal %q", c.args[1], code, term)
		}
		// Entry lines to a pipe: the count on the terminal, ended by a
		// newline (the pseudo-terminal writes it as \r\n).
		code, out, term = runOnTerminal(t, false, c.args...)
		if code != 0 || !strings.Contains(out, " "+c.verb) || !strings.HasPrefix(term, "\r"+c.verb+" 1 ") || !strings.HasSuffix(term, "\n") {
			t.Errorf("%s: exit %d, stdout %q, terminal %q", c.args[1], code, out, term)
		}
	}
}
