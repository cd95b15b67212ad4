package cli

import (
	"github.com/spf13/pflag"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
)

// brokersFlag registers --brokers, the Kafka seed brokers.
func brokersFlag(fs *pflag.FlagSet, s *string) {
	fs.StringVar(s, "brokers", "", "Kafka seed brokers host:port,... (default: the config's kafka_brokers)")
}

// brokersFlagValue checks a --brokers value; empty means the default.
func brokersFlagValue(s string) ([]string, error) {
	bs, err := brokers.ParseKafkaBrokers(s)
	if err != nil {
		return nil, usagef("--brokers %q: %v", s, err)
	}
	return bs, nil
}

// openBrokers returns the brokers of c, with --url and --brokers (either
// may be empty) overriding the configuration. It connects to nothing yet.
func openBrokers(c config.Config, url, brokersArg string) (*brokers.Set, error) {
	bs, err := brokersFlagValue(brokersArg)
	if err != nil {
		return nil, err
	}
	return brokers.New(c, brokers.Options{RabbitMQURL: url, KafkaBrokers: bs}), nil
}

// notBroker names a queue that ingest cannot drain.
func notBroker(q string) error {
	return usagef("--queue %s: not a [[queue]] with transport = \"rabbitmq\", \"kafka\" or \"sqs\" in the config (only broker dead-letter queues and topics are ingested; SQLite dead letters are in the catalog already)", q)
}

// The flags many commands share are defined once, here: the same name,
// default and help everywhere (they are a contract with scripts).

// jsonFlag registers --json. help says what is printed; "" is the usual
// "print JSON".
func jsonFlag(fs *pflag.FlagSet, p *bool, help string) {
	if help == "" {
		help = "print JSON"
	}
	fs.BoolVar(p, "json", false, help)
}

// urlFlag registers --url, the AMQP URL of RabbitMQ, overriding the
// configuration's rabbitmq_url; when ("with --live: ") says when it
// applies, "" always.
func urlFlag(fs *pflag.FlagSet, p *string, when string) {
	fs.StringVar(p, "url", "", when+"AMQP URL of the broker (default: the config's rabbitmq_url)")
}

// configFlag registers --config FILE, the Lily configuration (TOML), with
// the default path def ("" for none). help says what the command reads in
// it and whether it is required; "" is the usual "Lily configuration file
// (TOML)". --db and --catalog, which come with it wherever the catalog is
// opened, are storeFlags' (store.go).
func configFlag(fs *pflag.FlagSet, p *string, def, help string) {
	if help == "" {
		help = "Lily configuration file (TOML)"
	}
	fs.StringVar(p, "config", def, help)
}
