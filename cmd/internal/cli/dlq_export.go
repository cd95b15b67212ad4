package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
)

func init() {
	registerDLQ(newDLQExportCmd)
	registerDLQ(newDLQImportCmd)
}

func newDLQExportCmd() *cobra.Command {
	var (
		sf         storeFlags
		sel        = selectFlags{withStates: true}
		out, actor string
		omitBodies bool
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "export [filters] --out FILE",
		Short: "Write entries as NDJSON: body, typed headers, evidence, state and history, one entry per line",
		Long: `Write the selected entries (every state unless --state says otherwise) to
FILE as NDJSON, one entry per line in ID order, in the format
"lily.dlq.export/v1" (docs/export.md): body (base64), the typed headers
exactly as stored, evidence, state, decisions, and history (the entry's
audit records). The catalog is read page by page: memory stays flat.
--out - writes to standard output. A file is written beside FILE and
renamed when complete, so FILE is never half-written. The export is
audited (action "export", with the count).

'lily dlq import FILE' adds such a file to another catalog (SQLite or
PostgreSQL). Bodies and headers are personal data: --omit-bodies leaves
them out (such a file can be read but not imported).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("export: --out FILE is required (where to write the NDJSON; - for standard output)")
			}
			f, err := sel.filter(time.Now())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			if err := sel.checkNames(ctx, env); err != nil {
				return err
			}
			bar := newProgressBar(cmd.ErrOrStderr())
			bar.on = bar.on && out != "-" && !asJSON // "-": the lines go to the terminal themselves
			defer bar.finish()
			p := catalog.ExportParams{Filter: f, OmitBodies: omitBodies, Actor: actorOr(actor),
				Selector: fmt.Sprintf(`{"file":%q,"filter":%s}`, out, f.String()),
				Progress: func(n int) { bar.count("exported", n, "") }}
			var n int
			if out == "-" {
				bw := bufio.NewWriterSize(rawWriter(cmd.OutOrStdout()), 1<<16)
				if n, err = env.cat.Export(ctx, bw, p); err != nil {
					return err
				}
				return bw.Flush()
			}
			tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
			if err != nil {
				return fmt.Errorf("export: --out %s: %w", out, err)
			}
			defer os.Remove(tmp.Name()) // gone after the rename; cleaned up on failure
			bw := bufio.NewWriterSize(tmp, 1<<16)
			n, err = env.cat.Export(ctx, bw, p)
			if err == nil {
				err = bw.Flush()
			}
			if err == nil {
				err = tmp.Sync()
			}
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp.Name(), out)
			}
			if err != nil {
				return fmt.Errorf("export to %s: %w", out, err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return report.JSON(w, map[string]any{"file": out, "entries": n, "format": catalog.ExportFormat, "bodies_omitted": omitBodies})
			}
			fmt.Fprintf(w, "exported %d entries to %s (%s)\n", n, out, catalog.ExportFormat)
			return nil
		},
	}
	sf.add(cmd)
	sel.add(cmd)
	if st := cmd.Flags().Lookup("state"); st != nil { // an export takes every state by default
		st.DefValue = "all"
		_ = st.Value.Set("all")
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "the NDJSON file to write (- for standard output)")
	fl.BoolVar(&omitBodies, "omit-bodies", false, "leave bodies and headers out (the file cannot be imported then)")
	actorFlag(cmd, &actor)
	jsonFlag(fl, &asJSON, "print the summary as JSON")
	return cmd
}

func newDLQImportCmd() *cobra.Command {
	var (
		sf           storeFlags
		queue, actor string
		maps         []string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "import FILE [--queue Q | --map FROM=TO...]",
		Short: "Add the entries of an export file to the catalog, keeping event IDs, skipping duplicates",
		Long: `Read FILE, written by 'lily dlq export' (format "lily.dlq.export/v1";
- reads standard input), and add its entries to the catalog — created if
needed — with their event IDs, bodies and typed headers byte for byte,
evidence, states and decisions. --queue puts every entry in queue Q.

Duplicates are refused: a line whose dead-lettering the catalog holds
already (the same dl_key, or for entries without one the same queue, event
ID, body hash, source, coordinates and dead-lettering time) is skipped and
counted, so importing a file twice adds its entries once. The lines'
history records join the audit log (once each), and every batch of the
import is audited (action "import" with the event IDs added).

The file is read as a stream, in batches of 200 lines, each one
transaction; a line holds at most 64 MiB. A bad line stops the import with
its line number: every line before it is committed, none after it, and
running the import again after fixing the file skips what is in. An import
that fails before adding anything removes a SQLite file it created.

With a --config that has [[queue]]s, entries go only into those queues:
--map FROM=TO (repeatable) puts queue FROM's entries in TO. Imported
dead-lettered and discarded entries are counted as accepted on their queue
in the ledger, so 'lily reconcile' balances after an export and import.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			in := cmd.InOrStdin()
			name := args[0]
			if name != "-" {
				f, err := os.Open(name)
				if err != nil {
					return usagef("import: %v (FILE is an NDJSON export written by 'lily dlq export')", err)
				}
				defer f.Close()
				in = f
			}
			bar := newProgressBar(cmd.ErrOrStderr())
			bar.on = bar.on && !asJSON
			ip := catalog.ImportParams{Queue: queue, Name: name, Actor: actorOr(actor), Progress: func(r catalog.ImportResult) {
				bar.count("imported lines", r.Lines, fmt.Sprintf("%d added, %d duplicates", r.Added, r.Skipped))
			}}
			for _, m := range maps {
				from, to, ok := strings.Cut(m, "=")
				if !ok || from == "" || to == "" {
					return usagef("--map %q: want FROM=TO, a line's queue and the configured queue its entries go to", m)
				}
				if ip.Map == nil {
					ip.Map = map[string]string{}
				}
				ip.Map[from] = to
			}
			if sf.config != "" {
				c, err := sf.loadConfig()
				if err != nil {
					return err
				}
				if err := useIndexRedactor(c); err != nil {
					return err
				}
				// A configuration that names queues takes entries only
				// into them (as lily serve does).
				if len(c.Queues) > 0 {
					ip.Configured = func(name string) bool { _, ok := c.Queue(name); return ok }
				}
			}
			newFile, err := sf.newSQLiteFile()
			if err != nil {
				return err
			}
			cat, err := sf.openCatalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			res, err := cat.Import(ctx, in, ip)
			bar.finish()
			w := cmd.OutOrStdout()
			if err != nil {
				if res.Added > 0 || res.Skipped > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "import stopped: %d entries added and %d duplicates skipped before the error\n", res.Added, res.Skipped)
				} else if newFile != "" {
					// Nothing went in: the database this import created
					// goes too, so that a failed command leaves nothing
					// behind.
					cat.Close()
					if rerr := removeSQLiteFile(newFile); rerr != nil {
						return errors.Join(err, rerr)
					}
				}
				return err
			}
			if asJSON {
				return report.JSON(w, res)
			}
			fmt.Fprintf(w, "imported %s: %d lines, %d entries added, %d duplicates skipped, %d history records (op %s)\n",
				name, res.Lines, res.Added, res.Skipped, res.History, res.Op)
			return nil
		},
	}
	sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&queue, "queue", "", "put every imported entry in this queue (default: the queue in each line)")
	fl.StringArrayVar(&maps, "map", nil, "FROM=TO: put the entries of queue FROM in queue TO (repeatable); with --config, every entry must land in a configured queue")
	actorFlag(cmd, &actor)
	jsonFlag(fl, &asJSON, "")
	return cmd
}
