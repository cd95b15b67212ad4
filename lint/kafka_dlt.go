package lint

import (
	"fmt"
	"strconv"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

// CodeDLTOutlivesCatalog (warning): a kafka queue's dead-letter topic
// keeps records longer than the catalog keeps its entries
// (dlq_retention_hours): in the configuration (kafka_dlt_retention_hours)
// or, with --live, on the cluster (retention.ms -1 or longer).
const CodeDLTOutlivesCatalog = "dlt-outlives-catalog"

// dltWhy is why a dead-letter topic that outlives the catalog is a
// problem.
const dltWhy = "dead letters hold personal data: the catalog gives them an end of life (discard, expire and erase remove the body " +
	"and headers), but a copy in the dead-letter topic lives on until the topic's own retention removes it — erased data stays readable " +
	"with any Kafka consumer"

// kafkaDLTStatic warns about a kafka queue whose kafka_dlt_retention_hours
// is longer than its dlq_retention_hours.
func kafkaDLTStatic(cfg config.Config) []Finding {
	var out []Finding
	for _, q := range cfg.Queues {
		if q.Transport != lily.TransportKafka {
			continue
		}
		catalog := q.Settings().DLQRetentionHours
		if h, _ := cfg.KafkaDLTRetention(q.Name); h > catalog {
			out = append(out, Finding{Severity: Warning, Queue: q.Name, Code: CodeDLTOutlivesCatalog,
				What: fmt.Sprintf("kafka_dlt_retention_hours %q = %d, longer than dlq_retention_hours = %d", q.Name, h, catalog),
				Why:  dltWhy,
				Fix: fmt.Sprintf("leave %q out of kafka_dlt_retention_hours (it then follows dlq_retention_hours), or set it to at most %d; "+
					"then 'lily topology apply'", q.Name, catalog)})
		}
	}
	return out
}

// KafkaDLTLive judges the dead-letter topics as the cluster has them:
// configs maps a kafka queue to its dead-letter topic's name and configs
// (as kafka.Transport.TopicConfigs reads them); a queue missing from it
// is not judged. A retention.ms of -1, or longer than the queue's
// dlq_retention_hours, is a warning.
func KafkaDLTLive(cfg config.Config, topics map[string]string, configs map[string]map[string]string) []Finding {
	var out []Finding
	for _, q := range cfg.Queues {
		tc, ok := configs[q.Name]
		if q.Transport != lily.TransportKafka || !ok {
			continue
		}
		catalog := time.Duration(q.Settings().DLQRetentionHours) * time.Hour
		raw := tc["retention.ms"]
		ms, err := strconv.ParseInt(raw, 10, 64)
		var what string
		switch {
		case err != nil:
			continue // not reported by the cluster: nothing to judge
		case ms < 0:
			what = fmt.Sprintf("topic %s keeps records forever (retention.ms = %s)", topics[q.Name], raw)
		case time.Duration(ms)*time.Millisecond > catalog:
			what = fmt.Sprintf("topic %s keeps records %s (retention.ms = %s), longer than dlq_retention_hours = %d",
				topics[q.Name], time.Duration(ms)*time.Millisecond, raw, q.Settings().DLQRetentionHours)
		default:
			continue
		}
		out = append(out, Finding{Severity: Warning, Queue: q.Name, Code: CodeDLTOutlivesCatalog, What: what, Why: dltWhy,
			Fix: "'lily topology apply' sets the retention the configuration declares (kafka_dlt_retention_hours, default dlq_retention_hours)"})
	}
	return out
}
