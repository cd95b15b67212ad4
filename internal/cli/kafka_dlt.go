package cli

import (
	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/kafka"
)

// dltRetention is the dead-letter topic retention of a kafka queue as the
// configuration says (config.Config.KafkaDLTRetention).
func dltRetention(cfg config.Config, queue string) kafka.DLTRetention {
	h, b := cfg.KafkaDLTRetention(queue)
	return kafka.DLTRetention{Millis: int64(h) * 3600 * 1000, Bytes: b}
}

// dltRetentions is dltRetention of every kafka queue of cfg, for
// kafka.Options.DeadLetterRetention.
func dltRetentions(cfg config.Config) map[string]kafka.DLTRetention {
	out := map[string]kafka.DLTRetention{}
	for _, q := range cfg.Queues {
		if q.Transport == lily.TransportKafka {
			out[q.Name] = dltRetention(cfg, q.Name)
		}
	}
	return out
}
