// Package nats is Lily's NATS JetStream transport.
package nats
