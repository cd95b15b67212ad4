package brokers_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/ingest"
)

// A program that keeps a catalog drains the broker dead-letter queues of a
// lily.toml into it continuously, as 'lily serve' does: brokers opens the
// queues, ingest drains them.
func Example_ingest() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg, err := config.LoadConfig("lily.toml")
	if err != nil {
		log.Fatal(err)
	}
	cat, err := catalog.Open(ctx, cfg.DB) // catalog.OpenPostgres for catalog_url
	if err != nil {
		log.Fatal(err)
	}
	defer cat.Close()
	set := brokers.New(cfg, brokers.Options{}) // connects on first use
	defer set.Close()
	srcs, err := set.Sources(ctx) // every [[queue]] on a broker
	if err != nil {
		log.Fatal(err)
	}
	sources := map[string]ingest.Source{}
	for queue, t := range srcs {
		sources[queue] = ingest.Source{Drainer: t}
	}
	loop, err := ingest.New(ingest.Options{Catalog: cat, Sources: sources})
	if err != nil {
		log.Fatal(err)
	}
	loop.Run(ctx) // until interrupted; then it releases its leases
}
