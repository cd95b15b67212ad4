package cli

import (
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/kafka"
)

// brokersFlag registers --brokers, the Kafka seed brokers.
func brokersFlag(cmd *cobra.Command, s *string) {
	cmd.Flags().StringVar(s, "brokers", "", "Kafka seed brokers host:port,... (default: the config's kafka_brokers)")
}

// parseBrokersFlag checks a --brokers value; empty means the default.
func parseBrokersFlag(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	bs := kafka.ParseBrokers(s)
	for _, b := range bs {
		if err := config.ValidateBroker(b); err != nil {
			return nil, usagef("--brokers %q: %q %v", s, b, err)
		}
	}
	return bs, nil
}

// openBrokers returns the brokers of c, with --url and --brokers (either
// may be empty) overriding the configuration. It connects to nothing yet.
func openBrokers(c config.Config, url, brokersArg string) (*brokers.Set, error) {
	bs, err := parseBrokersFlag(brokersArg)
	if err != nil {
		return nil, err
	}
	return brokers.New(c, brokers.Options{RabbitMQURL: url, KafkaBrokers: bs}), nil
}

// notBroker names a queue that ingest cannot drain.
func notBroker(q string) error {
	return usagef("--queue %s: not a [[queue]] with transport = \"rabbitmq\", \"kafka\" or \"sqs\" in the config (only broker dead-letter queues and topics are ingested; SQLite dead letters are in the catalog already)", q)
}

// redactedURL hides the password of a broker or database URL for display.
func redactedURL(u string) string {
	if parsed, err := url.Parse(u); err == nil {
		return parsed.Redacted()
	}
	return "<invalid URL>"
}
