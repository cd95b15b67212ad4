// Package proccpu reads processes' CPU time from /proc: how the
// benchmarks attribute CPU to the broker, PostgreSQL and their own
// consumer processes. On a system without /proc every reading is
// reported as unavailable.
package proccpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Of reads a process's user+system CPU time.
func Of(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	// Fields after the command: state is f[0]; utime and stime are fields
	// 14 and 15 of stat, f[11] and f[12] here, in clock ticks (100 Hz).
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

// Named returns, by PID, the CPU time of every process whose command name
// (/proc/PID/comm) is comm and whose command line contains arg ("" for
// any).
func Named(comm, arg string) map[int]time.Duration {
	out := map[int]time.Duration{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		c, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		if arg != "" {
			cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
			if !strings.Contains(string(cmd), arg) {
				continue
			}
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		if cpu, ok := Of(pid); ok {
			out[pid] = cpu
		}
	}
	return out
}

// Since is the CPU the processes of now used since before: a process in
// both counts its difference, a process started since counts whole, and
// one that ended since is lost (its time cannot be read any more).
func Since(before, now map[int]time.Duration) time.Duration {
	var sum time.Duration
	for pid, cpu := range now {
		sum += cpu - before[pid]
	}
	return sum
}
