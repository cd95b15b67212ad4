package cli

import "github.com/spf13/cobra"

// examples are the help examples of the commands whose files do not set
// their own (cobra.Command.Example), by command path. Every command has
// at least one, and TestEveryCommandHasExamples checks each line's
// commands and flags against the command tree, so none goes stale.
var examples = map[string]string{
	"lily": `  lily demo                                  # the whole job on an embedded SQLite file
  lily dlq list --db lily.db                 # what waits, per queue
  lily dlq redrive --db lily.db --queue orders.created --dry-run`,
	"lily audit": `  lily audit --db lily.db --since 24h        # every decision of the last day
  lily audit --db lily.db --action redrive --json`,
	"lily consume": `  lily consume --config lily.toml --queue orders.created --exec ./handle-order
  lily consume --config lily.toml --queue orders.created --http http://127.0.0.1:9000/orders --concurrency 8`,
	"lily demo": `  lily demo                                  # SQLite, a mixed batch, ends with the ledger
  lily demo --scenario outage --json
  lily demo --transport rabbitmq --url amqp://guest:guest@127.0.0.1:5672/`,
	"lily dlq": `  lily dlq list --db lily.db
  lily dlq group --by fingerprint --db lily.db --queue orders.created
  lily dlq redrive --db lily.db --queue orders.created --sample 5 --rate 50`,
	"lily dlq cancel": `  lily dlq cancel 12 --db lily.db --actor alice`,
	"lily dlq discard": `  lily dlq discard --db lily.db --queue orders.created --fingerprint 9f2c1a --reason "bad schema, reported to shop-web" --dry-run
  lily dlq discard --db lily.db --ids 41,42 --reason "test orders"`,
	"lily dlq edit":  `  lily dlq edit 41 --db lily.db --body-file fixed.json --reason "customer id was a number"`,
	"lily dlq erase": `  lily dlq erase --db lily.db --key customer-42 --reason "erasure request 7" --dry-run`,
	"lily dlq expire": `  lily dlq expire --config lily.toml --dry-run
  lily dlq expire --config lily.toml --queue orders.created`,
	"lily dlq export": `  lily dlq export --db lily.db --queue orders.created --out orders.ndjson
  lily dlq export --db lily.db --reason permanent --omit-bodies --out reasons.ndjson`,
	"lily dlq group": `  lily dlq group --by reason --db lily.db
  lily dlq group --by fingerprint --db lily.db --queue orders.created --newer-than 2h`,
	"lily dlq import": `  lily dlq import orders.ndjson --db other.db
  lily dlq import orders.ndjson --config lily.toml --map orders=orders.created`,
	"lily dlq ingest": `  lily dlq ingest --config lily.toml
  lily dlq ingest --config lily.toml --queue orders.created --json`,
	"lily dlq jobs": `  lily dlq jobs --db lily.db --active
  lily dlq jobs --db lily.db --queue orders.created --json`,
	"lily dlq list": `  lily dlq list --db lily.db
  lily dlq list --config lily.toml --json`,
	"lily dlq parked": `  lily dlq parked --config lily.toml --queue ledger.postings`,
	"lily dlq peek": `  lily dlq peek --db lily.db --queue orders.created --limit 3
  lily dlq peek --db lily.db --queue orders.created --where '.customer.tier == "gold"' --body json`,
	"lily dlq redrive": `  lily dlq redrive --db lily.db --queue orders.created --dry-run
  lily dlq redrive --db lily.db --queue orders.created --fingerprint 9f2c1a --sample 5 --rate 50
  lily dlq redrive --db lily.db --ids 41 --to orders.created.v2`,
	"lily dlq resume": `  lily dlq resume 12 --db lily.db`,
	"lily dlq rules":  `  lily dlq rules --config lily.toml --dry-run`,
	"lily dlq search": `  lily dlq search "gateway timeout" --db lily.db --queue orders.created
  lily dlq search timeout --db lily.db --newer-than 1h --json`,
	"lily dlq show": `  lily dlq show 41 --db lily.db
  lily dlq show 41 --db lily.db --body hex --json`,
	"lily dlq unpark":      `  lily dlq unpark --config lily.toml --queue ledger.postings --key account-7 --dry-run`,
	"lily evidence":        `  echo '{"x-death":[{"reason":"rejected","queue":"orders","count":3}]}' | lily evidence decode`,
	"lily evidence decode": `  lily evidence decode < headers.json --json`,
	"lily queue": `  lily queue pause --config lily.toml --queue orders.created --reason "payments API maintenance"
  lily queue resume --config lily.toml --queue orders.created`,
	"lily queue pause": `  lily queue pause --config lily.toml --queue orders.created --reason "payments API maintenance"
  lily queue pause --db lily.db --queue orders.created --actor alice --json`,
	"lily queue resume": `  lily queue resume --config lily.toml --queue orders.created
  lily queue resume --db lily.db --queue orders.created --json`,
	"lily reconcile": `  lily reconcile --db lily.db
  lily reconcile --config lily.toml --json`,
	"lily relay": `  lily relay --config lily.toml --outbox postgres://app@db:5432/shop
  lily relay --config lily.toml --outbox postgres://app@db:5432/shop --once --json`,
	"lily topology": `  lily topology plan --config lily.toml
  lily topology apply --config lily.toml
  lily topology verify --config lily.toml`,
	"lily topology apply":  `  lily topology apply --config lily.toml --url amqp://guest:guest@127.0.0.1:5672/`,
	"lily topology plan":   `  lily topology plan --config lily.toml --json`,
	"lily topology verify": `  lily topology verify --config lily.toml --management-url http://guest:guest@127.0.0.1:15672`,
}

// addExamples sets the example of every command of the tree under c that
// has none, from examples.
func addExamples(c *cobra.Command) {
	if c.Example == "" {
		c.Example = examples[c.CommandPath()]
	}
	for _, s := range c.Commands() {
		addExamples(s)
	}
}
