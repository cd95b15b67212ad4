// Package testparallel raises a test binary's -test.parallel for the
// packages whose tests mostly wait — on brokers, emulators' timers and
// child processes — rather than compute. The default, GOMAXPROCS, is 2 on
// a 2-core machine: such a package then runs two tests at a time while the
// CPU idles, and being among the last packages 'go test work' starts, it
// sets the suite's wall time (docs/testing.md). ChildrenExitAtOnce cuts
// the wait on the child processes such a package starts.
package testparallel

import (
	"flag"
	"fmt"
	"os"
)

// Default sets -test.parallel to n unless the command line set it. Call it
// from TestMain before m.Run.
func Default(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if set {
		return
	}
	if err := flag.Set("test.parallel", fmt.Sprint(n)); err != nil {
		panic(fmt.Sprintf("testparallel: -test.parallel %d: %v", n, err))
	}
}

// ChildrenExitAtOnce makes the race-built child processes this test binary
// starts (itself, run as 'lily' or as a demo worker) exit as soon as they
// are done. A process built with -race that exits with status 0 first
// sleeps atexit_sleep_ms (GORACE; 1000 by default), so that a race found
// in its last moments is still reported; a test that waits on ten children
// ending normally waits ten seconds for nothing ('lily demo' in
// cmd/internal/demo: 8.7 s of wall with the sleep, 4.1 s without). The
// test binary itself keeps the sleep, and an explicit GORACE wins. Call it
// from TestMain before m.Run.
func ChildrenExitAtOnce() {
	if _, set := os.LookupEnv("GORACE"); !set {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
}
