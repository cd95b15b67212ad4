// Package config is the schema of Lily's configuration file, lily.toml:
// Config with its [[queue]] entries (lily.QueueConfig), the [[token]]
// entries of the HTTP API (TokenConfig and the roles), the RabbitMQ URL
// and the Kafka settings. ParseConfig and LoadConfig decode, default and
// validate a file; every refusal names the TOML key, the value, what is
// allowed and, for a decoding problem, the line.
//
// The root package lily keeps what the runtime needs (QueueConfig and its
// methods) and imports no file-format library; the tools (lint,
// cmd/internal/cli, httpapi) read files through this package.
//
//	cfg, err := config.LoadConfig("lily.toml")
//	if err != nil {
//		return err // e.g. queue "orders.created": retry_attempts: want an integer, got the string "3" (line 7)
//	}
//	q, _ := cfg.Queue("orders.created")
//	fmt.Println(q.Settings().DeliveryLimit)
//
// Zero is a value: a key that is absent gets its default, a key written
// as 0 is taken as written when 0 is allowed (max_redrives = 0,
// immediate_retry_millis = 0) and refused, with the key, the value and
// the range, when it is not (delivery_limit = 0, kafka_partitions = 0).
package config
