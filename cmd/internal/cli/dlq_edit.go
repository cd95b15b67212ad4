package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/internal/entryview"
)

func init() { registerDLQ(newDLQEditCmd) }

// editJSON is the --json output of 'lily dlq edit'.
type editJSON struct {
	Op       string           `json:"op"`
	Entry    catalog.EntryRef `json:"entry"`
	Version  int              `json:"version"`
	EditedBy string           `json:"edited_by"`
	Reason   string           `json:"reason"`
	Previous versionSummary   `json:"previous"`
	Current  versionSummary   `json:"current"`
	Diff     string           `json:"diff"`
}

// versionSummary names one body version by its hash and size.
type versionSummary struct {
	Version    int    `json:"version"`
	BodySHA256 string `json:"body_sha256"`
	BodySize   int64  `json:"body_size"`
}

func newDLQEditCmd() *cobra.Command {
	var (
		sf       storeFlags
		bodyFile string
		reason   string
		actor    string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "edit ID --body-file F --reason TEXT --actor NAME --config lily.toml",
		Short: "Store a corrected body as a new version of an entry (guarded; the original is kept), shown as a diff",
		Long: `Store the body in --body-file as a new version of a pending or needs_manual
entry: the original (version 0) and every earlier version are kept, the
change is shown (a unified line diff for text and JSON, a size and hash
summary for binary bodies), and the audit log records who, why and both
SHA-256 hashes. A later redrive sends the latest version with the headers
x-lily-edited-by, x-lily-edited-version and x-lily-edited-from-sha256.
'lily dlq show ID' lists every version.

Editing is guarded. Only an editor may edit: --actor must name a [[token]]
of --config whose edit_queues lists the entry's queue (or "*"); a role —
even admin — is not enough. When the queue declares a content_type, the new
body must decode as it (application/json must parse; text/* must be UTF-8).
Discard, expire and erase remove the bodies of every version.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return usagef("edit: %v", err)
			}
			switch {
			case bodyFile == "":
				return usagef("edit: --body-file F is required: the file holding the corrected body ('-' for stdin)")
			case strings.TrimSpace(reason) == "":
				return usagef(`edit: --reason TEXT is required: why the body is changed, kept with the version (e.g. --reason "total sent as a string by shop-web 4.2")`)
			case actor == "":
				return usagef("edit: --actor NAME is required: the editor, a [[token]] of --config with edit_queues covering the entry's queue")
			case sf.config == "":
				return usagef("edit: --config lily.toml is required: the editors are the [[token]] entries with edit_queues there")
			}
			body, err := readBodyFile(cmd.InOrStdin(), bodyFile)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			stopTraces, err := env.traceWrites(cmd, "lily dlq edit")
			if err != nil {
				return err
			}
			defer stopTraces()
			res, err := editEntry(ctx, env, id, body, reason, actor)
			if err != nil {
				return err
			}
			out := editOutput(res, reason)
			w := cmd.OutOrStdout()
			if asJSON {
				return report.JSON(w, out)
			}
			fmt.Fprintf(w, "entry %d (queue %s, event %s): version %d stored by %s (operation %s; see 'lily audit')\n",
				res.Entry.ID, res.Entry.Queue, res.Entry.EventID, res.Version, out.EditedBy, res.Op)
			fmt.Fprint(w, out.Diff)
			fmt.Fprintln(w, "a redrive now sends this version ('lily dlq redrive --ids", res.Entry.ID, "--dry-run' first)")
			return nil
		},
	}
	sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&bodyFile, "body-file", "", "the corrected body ('-' reads stdin); required")
	fl.StringVar(&reason, "reason", "", "why the body is changed; required, kept with the version and in the audit log")
	fl.StringVar(&actor, "actor", "", "the editor: a [[token]] name of --config with edit_queues covering the entry's queue; required")
	jsonFlag(fl, &asJSON, "")
	return cmd
}

// readBodyFile reads the edited body from path, or stdin for "-".
func readBodyFile(stdin io.Reader, path string) ([]byte, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("edit: --body-file: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, catalog.MaxEditBody+1))
	if err != nil {
		return nil, fmt.Errorf("edit: --body-file %s: %w", path, err)
	}
	if len(b) > catalog.MaxEditBody {
		return nil, fmt.Errorf("edit: --body-file %s: more than %d bytes: too large for an edit", path, catalog.MaxEditBody)
	}
	return b, nil
}

// editEntry checks that actor is an editor of the entry's queue in the
// configuration, then stores the version. A refusal is audited.
func editEntry(ctx context.Context, env *dlqEnv, id int64, body []byte, reason, actor string) (catalog.EditResult, error) {
	e, err := env.cat.Get(ctx, id)
	if errors.Is(err, catalog.ErrNotFound) {
		return catalog.EditResult{}, fmt.Errorf("edit: no entry %d in %s (list entries with 'lily dlq peek --queue Q')", id, env.path)
	}
	if err != nil {
		return catalog.EditResult{}, err
	}
	var tok *config.TokenConfig
	for i := range env.cfg.Tokens {
		if env.cfg.Tokens[i].Name == actor {
			tok = &env.cfg.Tokens[i]
		}
	}
	why := ""
	switch {
	case tok == nil:
		why = fmt.Sprintf("--actor %q is not a [[token]] of %s: editors are tokens with edit_queues", actor, env.sf.config)
	case !tok.CanEdit(e.Queue):
		why = fmt.Sprintf("token %q may not edit queue %s: add %q (or \"*\") to its edit_queues in %s", actor, e.Queue, e.Queue, env.sf.config)
	}
	if why != "" {
		rec := &catalog.AuditRecord{Op: catalog.NewOp(time.Now()), Actor: actor, Action: catalog.ActionRefused,
			Selector: fmt.Sprintf(`{"attempted":"edit","id":%d,"queue":%q}`, id, e.Queue), Outcome: catalog.OutcomeForbidden, Detail: why,
			EventIDs: []string{e.EventID}, Count: 1}
		if aerr := env.cat.AppendAudit(context.WithoutCancel(ctx), rec); aerr != nil {
			return catalog.EditResult{}, errors.Join(errors.New("edit refused: "+why), aerr)
		}
		return catalog.EditResult{}, fmt.Errorf("edit refused: %s", why)
	}
	q, _ := env.queue(e.Queue)
	return env.cat.Edit(ctx, catalog.EditParams{ID: id, Body: body, Reason: reason, ContentType: q.ContentType, Actor: actor})
}

func editOutput(res catalog.EditResult, reason string) editJSON {
	return editJSON{Op: res.Op, Entry: res.Entry, Version: res.Version, EditedBy: res.Current.EditedBy, Reason: reason,
		Previous: versionSummary{res.Previous.Version, res.Previous.BodySHA256, res.Previous.BodySize},
		Current:  versionSummary{res.Current.Version, res.Current.BodySHA256, res.Current.BodySize},
		Diff:     entryview.Diff(res.Previous.Version, res.Previous.Body, res.Current.Version, res.Current.Body)}
}

// printVersions writes an edited entry's versions after its body.
func printVersions(w io.Writer, vs []entryview.Version) {
	if len(vs) < 2 {
		return
	}
	fmt.Fprintf(w, "  versions (%d; a redrive sends version %d):\n", len(vs), vs[len(vs)-1].Version)
	for _, v := range vs {
		who := "original, as dead-lettered"
		if v.Version > 0 {
			who = fmt.Sprintf("by %s at %s: %s", v.EditedBy, v.EditedAt, v.Reason)
		}
		state := ""
		if v.Erased {
			state = " (body removed)"
		}
		fmt.Fprintf(w, "    version %d  %d bytes  sha256 %s  %s%s\n", v.Version, v.BodySize, v.BodySHA256, who, state)
		if v.Diff != "" {
			fmt.Fprintln(w, indentLines(strings.TrimSuffix(v.Diff, "\n"), "      "))
		}
	}
}

// withVersions adds an edited entry's versions to its view.
func withVersions(ctx context.Context, cat *catalog.Store, v *entryJSON, bodyFormat string) error {
	vs, err := cat.Versions(ctx, v.ID)
	if err != nil {
		return err
	}
	if len(vs) > 1 {
		v.Versions = entryview.Versions(vs, bodyFormat)
	}
	return nil
}
