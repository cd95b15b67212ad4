module github.com/lily-mq/lily/transport/nats

go 1.26.8

require (
	github.com/lily-mq/lily v0.0.0-00010101000000-000000000000
	github.com/nats-io/nats.go v1.56.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// Development: the workspace (go.work) uses the modules of this repository;
// outside it these replaces do the same.
replace github.com/lily-mq/lily => ../..
