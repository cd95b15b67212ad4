package lint

import (
	"fmt"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

// CodeDLTOutlivesCatalog (warning): a kafka queue's dead-letter topic
// keeps records longer than the catalog keeps its entries
// (dlq_retention_hours): in the configuration (kafka_dlt_retention_hours)
// or, with --live, on the cluster (retention.ms -1 or longer).
const CodeDLTOutlivesCatalog = "dlt-outlives-catalog"

// WhyDLTOutlivesCatalog is the why of a dlt-outlives-catalog finding,
// static or live: how a dead-letter topic that outlives the catalog is a
// problem.
const WhyDLTOutlivesCatalog = "dead letters hold personal data: the catalog gives them an end of life (discard, expire and erase remove the body " +
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
				Why:  WhyDLTOutlivesCatalog,
				Fix: fmt.Sprintf("leave %q out of kafka_dlt_retention_hours (it then follows dlq_retention_hours), or set it to at most %d; "+
					"then 'lily topology apply'", q.Name, catalog)})
		}
	}
	return out
}
