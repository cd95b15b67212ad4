// Package testparallel raises a test binary's -test.parallel for the
// packages whose tests mostly wait — on brokers, emulators' timers and
// child processes — rather than compute. The default, GOMAXPROCS, is 2 on
// a 2-core machine: such a package then runs two tests at a time while the
// CPU idles, and being among the last packages 'go test work' starts, it
// sets the suite's wall time (docs/testing.md).
package testparallel

import (
	"flag"
	"fmt"
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
