package rabbitbench

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/lily-mq/lily/bench/internal/proccpu"
)

// clock measures one run: wall time, this process's CPU time and the
// broker's (the beam.smp process on this machine, when it can be read from
// /proc; other clients of the broker add to it, so it is indicative).
type clock struct {
	wall           time.Time
	client, broker time.Duration
	brokerOK       bool
	mallocs        uint64
}

func startClock() clock {
	b, ok := brokerCPU()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return clock{wall: time.Now(), client: selfCPU(), broker: b, brokerOK: ok, mallocs: ms.Mallocs}
}

// stop returns the Result of run name over n messages: the wall time
// since start and the CPU and allocation figures.
func (c clock) stop(name string, n int) Result {
	r := Result{Name: name, N: n, Duration: time.Since(c.wall)}
	r.ClientCPU = selfCPU() - c.client
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.Allocs = ms.Mallocs - c.mallocs
	if b, ok := brokerCPU(); ok && c.brokerOK {
		r.BrokerCPU = b - c.broker
	}
	return r
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var brokerPID = findBroker()

// findBroker returns the PID of the local RabbitMQ node, or 0: of the
// beam.smp processes running rabbit, the one with the most CPU time
// (rabbitmqctl starts short-lived ones too).
func findBroker() int {
	if s := os.Getenv("RABBITBENCH_BROKER_PID"); s != "" {
		pid, _ := strconv.Atoi(s)
		return pid
	}
	best, bestCPU := 0, time.Duration(-1)
	for pid, cpu := range proccpu.Named("beam.smp", "rabbit") {
		if cpu > bestCPU {
			best, bestCPU = pid, cpu
		}
	}
	return best
}

// brokerCPU reads the broker's user+system CPU time from /proc.
func brokerCPU() (time.Duration, bool) {
	if brokerPID == 0 {
		return 0, false
	}
	return proccpu.Of(brokerPID)
}
