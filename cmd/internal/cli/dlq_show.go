package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/internal/entryview"
)

func init() {
	registerDLQ(newDLQShowCmd)
	registerDLQ(newDLQPeekCmd)
}

// printEntry writes the entry for people.
func printEntry(w io.Writer, v entryJSON, now time.Time) {
	title := fmt.Sprintf("entry %d", v.ID)
	if v.Location != "catalog" {
		title = "in the broker's DLQ (not ingested yet)"
	}
	fmt.Fprintf(w, "%s  queue %s  state %s\n", title, v.Queue, orDash(string(v.State)))
	kv := func(k, val string) {
		if val != "" {
			fmt.Fprintf(w, "  %-18s %s\n", k, val)
		}
	}
	kv("event id", v.EventID)
	kv("key", v.Key)
	kv("type", v.Type)
	kv("reason", v.Reason)
	if v.ErrorType != "" || v.ErrorMessage != "" {
		kv("error", fmt.Sprintf("%s: %s", orDash(v.ErrorType), v.ErrorMessage))
	}
	kv("fingerprint", v.Fingerprint)
	kv("consumer version", v.ConsumerVersion)
	kv("source", v.Source)
	kv("counts", fmt.Sprintf("delivery %d, retries %d, redrives %d", v.DeliveryCount, v.RetryCount, v.RedriveCount))
	kv("dead-lettered", fmt.Sprintf("%s (%s ago)", v.DeadLetteredAt.Format(time.RFC3339), humanAge(now.Sub(v.DeadLetteredAt))))
	if v.DecidedAt != nil {
		kv("decision", fmt.Sprintf("%s — by %s at %s", v.Decision, v.DecidedBy, v.DecidedAt.Format(time.RFC3339)))
	}
	if v.ErasedAt != nil {
		kv("data removed", fmt.Sprintf("%s (record only: body of %d bytes and headers of %d bytes removed)", v.ErasedAt.Format(time.RFC3339), v.BodySize, v.HeadersSize))
	}
	kv("body sha256", v.BodySHA256)
	printTriage(w, v.Triage)
	printEvidence(w, v.Evidence, "    ")
	if len(v.Headers) > 0 {
		fmt.Fprintln(w, "  headers:")
		for _, k := range sortedHeaderNames(v.Headers) {
			fmt.Fprintf(w, "    %s = %s\n", k, v.Headers[k])
		}
	}
	fmt.Fprint(w, "  ")
	printBody(w, v.Body)
	printVersions(w, v.Versions) // dlq_edit.go
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newDLQShowCmd() *cobra.Command {
	var (
		sf         storeFlags
		asJSON     bool
		bodyFormat string
	)
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one catalog entry: evidence (Lily's and foreign), headers and body; changes nothing",
		Long: `Show one entry of the catalog by its ID: its state and decisions, Lily's
evidence with the message's failed attempts (x-lily-attempts: time in UTC,
retry and delivery counts, outcome, error; the first and the most recent are
kept, the others counted), foreign evidence decoded from the headers (RabbitMQ x-death and
x-first/last-death-*, MassTransit MT-Fault-*, Spring Kafka kafka_dlt-*, Kafka
Connect __connect.errors.*, Kafka Streams __streams.errors.*, NServiceBus
NServiceBus.ExceptionInfo.*), every header with its type, and the body —
pretty JSON, UTF-8 text or a hex dump (--body). Nothing is consumed or changed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return usagef("show: %v", err)
			}
			if err := validBodyFormat(bodyFormat); err != nil {
				return err
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			e, err := env.cat.Get(ctx, id)
			if errors.Is(err, catalog.ErrNotFound) {
				return fmt.Errorf("show: no entry %d in %s (list entries with 'lily dlq peek --queue Q' or 'lily dlq group')", id, env.path)
			}
			if err != nil {
				return err
			}
			v := entryView(e, "catalog", bodyFormat)
			if err := withVersions(ctx, env.cat, &v, bodyFormat); err != nil { // dlq_edit.go
				return err
			}
			if err := entryview.AddTriage(ctx, env.cat, &v, e); err != nil {
				return err
			}
			if asJSON {
				return report.JSON(cmd.OutOrStdout(), v)
			}
			printEntry(cmd.OutOrStdout(), v, time.Now())
			return nil
		},
	}
	sf.add(cmd)
	jsonFlag(cmd.Flags(), &asJSON, "")
	cmd.Flags().StringVar(&bodyFormat, "body", bodyAuto, "body format: auto, text, json or hex")
	return cmd
}

func newDLQPeekCmd() *cobra.Command {
	var (
		sf         storeFlags
		queue      string
		states     string
		url        string
		kbrk       string
		limit      int
		asJSON     bool
		bodyFormat string
		where      string
	)
	cmd := &cobra.Command{
		Use:   "peek --queue Q",
		Short: "Show the first entries of a queue's dead-letter work list; consumes nothing",
		Long: `Show the oldest --limit entries of a queue held in the catalog (pending,
parked, needs_manual; see --state), each as 'lily dlq show' does.

With --config, for a queue with transport = "rabbitmq" or "kafka", dead
letters still waiting in the broker's DLQ or dead-letter topic (not ingested
yet) are shown after them: they are read without being consumed (RabbitMQ
puts them back in order; on Kafka no offset is committed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if queue == "" {
				return usagef("peek: --queue is required (the source queue whose dead letters to show)")
			}
			if limit < 1 || limit > 1000 {
				return usagef("--limit %d: must be in 1..1000", limit)
			}
			if err := validBodyFormat(bodyFormat); err != nil {
				return err
			}
			st, err := parseStates(states)
			if err != nil {
				return usagef("%v", err)
			}
			f := catalog.Filter{Queue: queue, States: st}
			if where != "" {
				if f.Where, err = parseWhereFlag(where); err != nil {
					return usagef("%v", err)
				}
			}
			ctx := cmd.Context()
			env, err := openDLQ(ctx, sf)
			if err != nil {
				return err
			}
			defer env.Close()
			if err := env.checkQueue(ctx, "queue", queue); err != nil {
				return err
			}
			es, err := env.cat.List(ctx, f, limit)
			if err != nil {
				return err
			}
			views := make([]entryJSON, 0, len(es))
			for _, e := range es {
				views = append(views, entryView(e, "catalog", bodyFormat))
			}
			if q, ok := env.queue(queue); ok && brokers.IsBroker(q.Transport) && len(views) < limit && where == "" { // --where reads the catalog only
				brk, err := openBrokers(env.cfg, url, kbrk)
				if err != nil {
					return err
				}
				defer brk.Close()
				ds, err := brk.PeekDeadLetters(ctx, q, limit-len(views))
				if err != nil {
					return err
				}
				now := time.Now()
				for _, d := range ds {
					d.Queue = queue
					views = append(views, entryView(catalog.EntryFromDeadLetter(queue, d, now), "broker_dlq", bodyFormat))
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return report.JSON(out, map[string]any{"queue": queue, "entries": views})
			}
			if len(views) == 0 {
				fmt.Fprintf(out, "no entries of queue %s in state %s\n", queue, states)
				return nil
			}
			now := time.Now()
			for i, v := range views {
				if i > 0 {
					fmt.Fprintln(out)
				}
				printEntry(out, v, now)
			}
			return nil
		},
	}
	sf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&queue, "queue", "", "the source queue (required)")
	fl.IntVar(&limit, "limit", 10, "at most this many entries, 1..1000")
	fl.StringVar(&states, "state", "held", "entry states, comma-separated, 'held' or 'all'")
	urlFlag(fl, &url, "")
	brokersFlag(fl, &kbrk)
	jsonFlag(fl, &asJSON, "")
	fl.StringVar(&bodyFormat, "body", bodyAuto, "body format: auto, text, json or hex")
	addWhereFlag(cmd, &where)
	return cmd
}
