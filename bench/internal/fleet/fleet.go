// Package fleet holds what the multi-process benchmarks (fleetbench,
// matrixbench) share: starting the benchmark's own binary again in a
// role, a PostgreSQL schema of a run's own, and the CPU time of the
// processes a run involves — its own children, every PostgreSQL process
// and the broker's — read from /proc (package proccpu).
package fleet

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"time"

	"github.com/lily-mq/lily/bench/internal/proccpu"
)

// Start starts the running executable again with env added to this
// process's environment (KEY=VALUE: how the child learns its role), its
// standard error shared with this process's.
func Start(env ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the running executable to start a child: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	return cmd, nil
}

// SchemaURL returns base (a PostgreSQL URL) with search_path set to
// schema, so that everything opened on it lives in that schema.
func SchemaURL(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("PostgreSQL URL %q: %w (want postgres://user@host:port/db?sslmode=disable)", base, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// CreateSchema creates schema through admin and returns base with its
// search_path (SchemaURL); DropSchema removes it.
func CreateSchema(ctx context.Context, admin *sql.DB, base, schema string) (string, error) {
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", fmt.Errorf("create schema %s (is PostgreSQL running at %s?): %w", schema, base, err)
	}
	return SchemaURL(base, schema)
}

// DropSchema removes schema and everything in it.
func DropSchema(ctx context.Context, admin *sql.DB, schema string) error {
	if _, err := admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// CPU is the CPU time, by PID, of a run's own processes, of every
// PostgreSQL process and of the broker's at one moment.
type CPU struct{ Procs, Postgres, Broker map[int]time.Duration }

// Broker reads the broker's processes' CPU (nil: no broker process).
type Broker func() map[int]time.Duration

// RabbitMQ is the RabbitMQ node's CPU.
func RabbitMQ() map[int]time.Duration { return proccpu.Named("beam.smp", "rabbit") }

// PIDs reads the CPU of the given processes (a process that ended is not
// counted).
func PIDs(pids ...int) Broker {
	return func() map[int]time.Duration {
		out := map[int]time.Duration{}
		for _, pid := range pids {
			if t, ok := proccpu.Of(pid); ok {
				out[pid] = t
			}
		}
		return out
	}
}

// ReadCPU reads the CPU of the commands procs (those started), of every
// PostgreSQL process and of broker (none when nil).
func ReadCPU(procs []*exec.Cmd, broker Broker) CPU {
	var pids []int
	for _, c := range procs {
		if c != nil && c.Process != nil {
			pids = append(pids, c.Process.Pid)
		}
	}
	r := CPU{Procs: PIDs(pids...)(), Postgres: proccpu.Named("postgres", ""), Broker: map[int]time.Duration{}}
	if broker != nil {
		r.Broker = broker()
	}
	return r
}

// PerMessage is the CPU each group used between before and c, in
// microseconds per message of n (proccpu.Since: a process started since
// before counts whole).
func (c CPU) PerMessage(before CPU, n int) (procs, postgres, broker float64) {
	per := func(b, a map[int]time.Duration) float64 {
		return float64(proccpu.Since(b, a).Microseconds()) / float64(max(n, 1))
	}
	return per(before.Procs, c.Procs), per(before.Postgres, c.Postgres), per(before.Broker, c.Broker)
}
