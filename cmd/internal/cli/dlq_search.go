package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/catalog/where"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/entryview"
)

func init() { registerDLQ(newDLQSearchCmd) }

// whereHelp is the --where flag's help.
const whereHelp = `only entries whose JSON body satisfies this expression, e.g. '.customer.id == "42"' ` +
	`(==, !=, <, <=, >, >=, exists(.path), and, or, not; see docs/where.md); bodies that are not JSON never match`

// addWhereFlag registers --where on cmd.
func addWhereFlag(cmd *cobra.Command, where *string) {
	cmd.Flags().StringVar(where, "where", "", whereHelp)
}

// useIndexRedactor makes the search index of this process redact with
// the configuration's redact_patterns too (the default rules always run).
func useIndexRedactor(c config.Config) error {
	if len(c.RedactPatterns) == 0 {
		return nil
	}
	r, err := evidence.NewRedactor(c.RedactPatterns...)
	if err != nil {
		return fmt.Errorf("redact_patterns: %w", err)
	}
	catalog.SetIndexRedactor(r)
	return nil
}

// parseWhereFlag reads --where, as a usage problem naming the flag.
func parseWhereFlag(s string) (*where.Expr, error) {
	w, err := where.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("--where %s: %v", quoteShort(s), strings.TrimPrefix(err.Error(), where.ErrInvalid.Error()+": "))
	}
	return w, nil
}

// quoteShort quotes s, cut to its first 80 bytes when longer (an
// expression refused for its size is not echoed whole).
func quoteShort(s string) string {
	if len(s) <= 80 {
		return strconv.Quote(s)
	}
	cut := 80
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

func newDLQSearchCmd() *cobra.Command {
	var (
		sf      storeFlags
		sel     = selectFlags{withStates: true}
		limit   int
		afterID int64
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "search TEXT [--queue Q] [filters]",
		Short: "Find entries by the words of their error messages and (redacted) bodies",
		Long: `Search the catalog's full-text index: the error message and the body of
every entry, after the redactors (credentials, tokens, password= pairs,
card numbers, and the config's redact_patterns) — the index never holds a
raw secret, and an entry whose data was discarded, expired or erased is no
longer in it. Bodies that are not text (a NUL byte, not UTF-8) are not
indexed; only their error message is.

TEXT is words that must all appear (case-insensitive; a word is a run of
letters and digits), "quoted phrases" whose words appear in that order, and
prefix* words. A word with punctuation such as orders.created or 10.0.0.7
is the phrase of its parts.

The filters of 'lily dlq group' narrow the hits (held entries unless
--state says otherwise; --where on the JSON body). Hits come in ID order
(oldest first), at most --limit; page on with --after-id (the last ID
shown). Uses SQLite FTS5 or PostgreSQL full-text search (GIN index).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 10000 {
				return usagef("--limit %d: must be in 1..10000", limit)
			}
			f, err := sel.filter(time.Now())
			if err != nil {
				return err
			}
			f.AfterID = afterID
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			if err := sel.checkNames(ctx, env); err != nil {
				return err
			}
			return runSearch(ctx, cmd.OutOrStdout(), env.cat, catalog.SearchParams{Text: args[0], Filter: f, Limit: limit}, asJSON)
		},
	}
	sf.add(cmd)
	sel.add(cmd)
	fl := cmd.Flags()
	fl.IntVar(&limit, "limit", 50, "at most this many hits, 1..10000")
	fl.Int64Var(&afterID, "after-id", 0, "only entries with an ID above this (the next page: the last ID shown)")
	jsonFlag(fl, &asJSON, "")
	return cmd
}

func runSearch(ctx context.Context, out io.Writer, cat *catalog.Store, p catalog.SearchParams, asJSON bool) error {
	hits := []entryview.SearchHit{}
	err := cat.Search(ctx, p, func(h *catalog.SearchHit) error {
		hits = append(hits, entryview.NewSearchHit(h, true))
		return nil
	})
	if err != nil {
		if errors.Is(err, catalog.ErrEmptySearch) {
			return usagef("search %q: %v", p.Text, err)
		}
		if errors.Is(err, catalog.ErrSearchTooLong) {
			return usagef("search: %v", err)
		}
		return err
	}
	var next int64
	if len(hits) == p.Limit {
		next = hits[len(hits)-1].ID
	}
	if asJSON {
		res := map[string]any{"query": p.Text, "entries": hits}
		if next > 0 {
			res["next_after_id"] = next
		}
		return report.JSON(out, res)
	}
	if len(hits) == 0 {
		fmt.Fprintf(out, "no entries match %q\n", p.Text)
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tqueue\tstate\tage\treason\tmatch\t")
	for _, h := range hits {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t\n", h.ID, h.Queue, h.State, humanAge(now.Sub(h.DeadLetteredAt)), h.Reason, snippetText(h.Snippet))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next > 0 {
		fmt.Fprintf(out, "\nmore may match: the next page is --after-id %d\n", next)
	}
	return nil
}

// snippetText renders a snippet on one line with the matches in **.
func snippetText(parts []catalog.SnippetPart) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Match {
			b.WriteString("**" + p.Text + "**")
		} else {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// listWhereRow is one queue of 'lily dlq list --where': its held entries
// whose JSON body matches.
type listWhereRow struct {
	Queue    string     `json:"queue"`
	Matching int64      `json:"matching"`
	Oldest   *time.Time `json:"oldest"`
}

// runListWhere is 'lily dlq list --where EXPR': per queue, the held
// entries whose body matches, streamed (one entry in memory at a time).
func runListWhere(ctx context.Context, out io.Writer, cat *catalog.Store, expr string, asJSON bool) error {
	w, err := parseWhereFlag(expr)
	if err != nil {
		return usagef("%v", err)
	}
	rows := map[string]*listWhereRow{}
	err = cat.Each(ctx, catalog.Filter{States: catalog.HeldStates, Where: w}, func(e *catalog.Entry) error {
		r := rows[e.Queue]
		if r == nil {
			r = &listWhereRow{Queue: e.Queue}
			rows[e.Queue] = r
		}
		r.Matching++
		if r.Oldest == nil || e.DeadLetteredAt.Before(*r.Oldest) {
			t := e.DeadLetteredAt
			r.Oldest = &t
		}
		return nil
	})
	if err != nil {
		return err
	}
	list := make([]listWhereRow, 0, len(rows))
	for _, r := range rows {
		list = append(list, *r)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Queue < list[j].Queue })
	if asJSON {
		return report.JSON(out, map[string]any{"where": expr, "queues": list})
	}
	if len(list) == 0 {
		fmt.Fprintf(out, "no held entry's body matches %s\n", expr)
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "queue\tmatching\toldest\t\n")
	for _, r := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\t\n", r.Queue, r.Matching, humanAge(now.Sub(*r.Oldest)))
	}
	return tw.Flush()
}
