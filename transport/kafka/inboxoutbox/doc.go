// Package inboxoutbox holds no code: its tests run packages inbox and
// outbox on Kafka (franz-go's in-process kfake), beside the Kafka
// transport, so that the tests of the root module need no Kafka client.
// They share their harness with the inbox's and outbox's own tests on
// SQLite and RabbitMQ (internal/effecttest): the kill -9 between commit
// and ack of a consumer fed by a foreign producer, byte-identical twins
// from a foreign producer, and the relay's publishing order and event IDs.
package inboxoutbox
