package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
)

// parseSchemaVersion reads --schema-version: a version >= 1, or "none"
// (0: entries without one).
func parseSchemaVersion(s string) (int, error) {
	if s == "none" {
		return 0, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > evidence.MaxSchemaVersion {
		return 0, fmt.Errorf("--schema-version %q: want a schema version >= 1 (as x-lily-schema-version carries it), or 'none' for entries without one", s)
	}
	return v, nil
}

// schemaKey names a schema version in output: "3", or "none".
func schemaKey(v int) string {
	if v == 0 {
		return "none"
	}
	return strconv.Itoa(v)
}

// heldSchemaVersions counts the held entries of queue per schema version.
func heldSchemaVersions(ctx context.Context, cat *catalog.Store, queue string) (map[string]int64, error) {
	counts, err := cat.SchemaVersions(ctx, catalog.Filter{Queue: queue, States: catalog.HeldStates})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(counts))
	for _, c := range counts {
		out[schemaKey(c.Version)] = c.Count
	}
	return out, nil
}

// schemaVersionsText renders per-version counts as "v3:12 v4:2 none:1",
// versions ascending, or "-" when there are none.
func schemaVersionsText(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, errA := strconv.Atoi(keys[i])
		b, errB := strconv.Atoi(keys[j])
		if errA != nil || errB != nil {
			return errA == nil // numbers first, "none" last
		}
		return a < b
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		if k == "none" {
			parts[i] = fmt.Sprintf("none:%d", m[k])
		} else {
			parts[i] = fmt.Sprintf("v%s:%d", k, m[k])
		}
	}
	return strings.Join(parts, " ")
}

// schemaMismatch is what a redrive selection holds that its target queue's
// consumer may not read.
type schemaMismatch struct {
	Queue string `json:"queue"`
	// Reads are the queue's schema_versions (empty: not declared).
	Reads []int `json:"reads,omitempty"`
	// Newest is the newest version among the queue's catalog entries, the
	// yardstick when Reads is empty.
	Newest int `json:"newest,omitempty"`
	// Entries counts the selected pending entries per version it does not
	// read ("none" for entries without a version).
	Entries map[string]int64 `json:"entries"`
	// Refused is set when Reads is declared: the redrive is refused
	// without --force.
	Refused bool `json:"refused"`
}

// checkRedriveSchemas compares the schema versions of the pending entries
// f selects with what each target queue's consumers read: the queue's
// schema_versions when declared (a mismatch refuses the redrive without
// --force), else the newest version seen among the queue's entries (a
// selection holding older versions only warns).
func checkRedriveSchemas(ctx context.Context, env *dlqEnv, f catalog.Filter) ([]schemaMismatch, error) {
	f.States = []catalog.State{catalog.StatePending}
	queues := []string{f.Queue}
	if f.Queue == "" {
		groups, err := env.cat.Group(ctx, "queue", f)
		if err != nil {
			return nil, err
		}
		queues = queues[:0]
		for _, g := range groups {
			queues = append(queues, g.Key)
		}
		slices.Sort(queues)
	}
	var out []schemaMismatch
	for _, q := range queues {
		qf := f
		qf.Queue = q
		counts, err := env.cat.SchemaVersions(ctx, qf)
		if err != nil {
			return nil, err
		}
		qc, _ := env.queue(q)
		m := schemaMismatch{Queue: q, Reads: qc.SchemaVersions, Entries: map[string]int64{}, Refused: len(qc.SchemaVersions) > 0}
		if !m.Refused {
			if m.Newest, err = env.cat.NewestSchemaVersion(ctx, q); err != nil {
				return nil, err
			}
		}
		for _, c := range counts {
			switch {
			case m.Refused && c.Version != 0 && slices.Contains(m.Reads, c.Version):
			case m.Refused && c.Version == 0:
				// No version recorded: nothing to compare; not refused.
			case !m.Refused && (c.Version == 0 || c.Version >= m.Newest):
			default:
				m.Entries[schemaKey(c.Version)] = c.Count
			}
		}
		if len(m.Entries) > 0 {
			out = append(out, m)
		}
	}
	return out, nil
}

// printSchemaWarnings writes one warning per queue whose selection holds
// schema versions its consumers may not read.
func printSchemaWarnings(w io.Writer, ms []schemaMismatch, force bool) {
	for _, m := range ms {
		if m.Refused {
			what := "refused without --force"
			if force {
				what = "sent anyway (--force)"
			}
			fmt.Fprintf(w, "warning: %s: the selection holds entries of schema version(s) %s, but the queue's consumers read "+
				"schema_versions = %v: %s. Narrow the selection with --schema-version, add the version to schema_versions "+
				"once the consumer reads it, or pass --force.\n", m.Queue, schemaVersionsText(m.Entries), m.Reads, what)
			continue
		}
		fmt.Fprintf(w, "warning: %s: the selection holds entries of schema version(s) %s, older than the newest version "+
			"among the queue's dead letters (%d); check that the consumer still reads them (declare schema_versions in "+
			"--config to make this a check).\n", m.Queue, schemaVersionsText(m.Entries), m.Newest)
	}
}

// schemaRefused reports whether any mismatch refuses the redrive.
func schemaRefused(ms []schemaMismatch) bool {
	for _, m := range ms {
		if m.Refused {
			return true
		}
	}
	return false
}
