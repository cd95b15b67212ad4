package cli

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/report"
)

func init() { registerDLQ(newDLQIngestCmd) }

// ingestJSON is the --json output of 'lily dlq ingest'.
type ingestJSON struct {
	Queues map[string]int `json:"queues"`
	Total  int            `json:"total"`
}

func newDLQIngestCmd() *cobra.Command {
	var (
		sf     storeFlags
		url    string
		kbrk   string
		queue  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ingest",
		Short: "Drain broker dead-letter queues into the catalog (catalog commit, then broker ack)",
		Long: `Drain the dead letters of every [[queue]] on a broker (or only --queue) into
the catalog at --db (or the config's db):

  rabbitmq  <queue>.dlq.v2; each batch is committed to the catalog, then
            acknowledged on the broker. Dead letters the broker made by itself
            (x-death reasons rejected, expired, maxlen, delivery_limit) get
            their reason and evidence from the broker's headers.
  kafka     <topic>.dlt (or the topic kafka_dead_letter_topics names), read
            with its own consumer group (lily.<topic>.dlt-drain) whose offsets
            are committed after each catalog commit; the records stay in the
            topic. Dead-letter topics written by others are understood too:
            Spring Kafka (kafka_dlt-*), Kafka Connect (__connect.errors.*) and
            Kafka Streams (__streams.errors.*) evidence is kept with the entry
            ('lily dlq show' decodes it).

Ingesting the same dead letter twice adds one entry.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if sf.config == "" {
				return usagef("--config FILE is required: it names the broker queues to ingest")
			}
			c, err := sf.loadConfig()
			if err != nil {
				return err
			}
			path, err := sf.where()
			if err != nil {
				return err
			}
			if _, foreign := c.ForeignDLQ(queue); queue != "" && !foreign {
				if q, ok := c.Queue(queue); !ok || !brokers.IsBroker(q.Transport) {
					return notBroker(queue)
				}
			}
			brk, err := openBrokers(c, url, kbrk)
			if err != nil {
				return err
			}
			defer brk.Close()
			sources, err := brk.Sources(ctx)
			if err != nil {
				return err
			}
			if len(sources) == 0 && len(c.ForeignDLQs) == 0 {
				return usagef("--config %s: no [[queue]] has transport = \"rabbitmq\" or \"kafka\": nothing to ingest", sf.config)
			}
			opened, err := sf.openCatalog(ctx)
			if err != nil {
				return err
			}
			defer opened.Close()
			tp, stopTraces, err := tracerFromEnv(ctx, "lily dlq ingest", "lily-dlq-ingest", cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer stopTraces()
			cat := opened.WithTracerProvider(tp) // each dead letter's catalog write a span in its trace
			out := ingestJSON{Queues: map[string]int{}}
			names := make([]string, 0, len(sources))
			for q := range sources {
				if queue == "" || q == queue {
					names = append(names, q)
				}
			}
			sort.Strings(names)
			bar := newProgressBar(cmd.ErrOrStderr())
			bar.on = bar.on && !asJSON
			for _, q := range names {
				seen := 0
				n, err := cat.IngestWith(ctx, sources[q], catalog.IngestParams{Queue: q, OnEntry: func(*catalog.Entry, bool, bool) {
					seen++
					bar.count("ingesting "+q, seen, "")
				}})
				bar.finish()
				out.Queues[q] = n
				out.Total += n
				if err != nil {
					return fmt.Errorf("ingest %s (after %d dead letters): %w", q, n, err)
				}
			}
			foreign, err := ingestForeign(ctx, brk, cat, c, queue, &out)
			names = append(names, foreign...)
			if err != nil {
				return err
			}
			if asJSON {
				return report.JSON(cmd.OutOrStdout(), out)
			}
			for _, q := range names {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d dead letters ingested into %s\n", q, out.Queues[q], path)
			}
			return nil
		},
	}
	sf.add(cmd)
	urlFlag(cmd.Flags(), &url, "")
	brokersFlag(cmd.Flags(), &kbrk)
	cmd.Flags().StringVar(&queue, "queue", "", "ingest only this queue's dead letters")
	jsonFlag(cmd.Flags(), &asJSON, "")
	return cmd
}
