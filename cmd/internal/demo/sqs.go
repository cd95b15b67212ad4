package demo

import (
	"fmt"
	"time"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/sqs"
)

// sqsVisibility is the demo's SQS visibility timeout: a dead worker's
// messages come back after it (SQS has no consumer connection whose death
// returns them at once), with their receive counts raised.
const sqsVisibility = 2 * time.Second

// sqsBackend is the demo's SQS: an endpoint given with --url (http(s)://…),
// or an in-process emulator (Emulators.SQS), which lives as long as the
// demo's parent process and listens on a real TCP port, so that the worker
// child processes reach it like any endpoint (the parent passes them --url).
type sqsBackend struct {
	endpoint string
	query    bool
	stop     func() // stops the in-process emulator; nil with --url
	tr       *sqs.Transport
}

// openSQSBackend opens the SQS transport of conn: conn.url when it is an
// http(s) URL, else an in-process emulator.
func openSQSBackend(conn connection) (*sqsBackend, error) {
	s := &sqsBackend{endpoint: conn.url, query: conn.sqsQuery}
	if !isHTTP(conn.url) {
		url, stop, err := conn.em.SQS()
		if err != nil {
			return nil, fmt.Errorf("demo: start an in-process SQS: %w", err)
		}
		s.endpoint, s.query, s.stop = url, true, stop
	}
	protocol := ""
	if s.query {
		protocol = "query"
	}
	vis := int(sqsVisibility / time.Second)
	o, err := brokers.SQSOptions(config.Config{SQSEndpoint: s.endpoint, SQSProtocol: protocol, SQSVisibilityTimeoutSeconds: &vis})
	if err != nil {
		s.Close()
		return nil, err
	}
	if s.tr, err = sqs.Open(o); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the client and stops the emulator.
func (s *sqsBackend) Close() {
	if s.tr != nil {
		s.tr.Close()
	}
	if s.stop != nil {
		s.stop()
	}
}

// workerArgs are the worker's flags that reach the same endpoint.
func (s *sqsBackend) workerArgs() []string {
	args := []string{"--url", s.endpoint}
	if s.query {
		args = append(args, "--sqs-query")
	}
	return args
}

// where describes the endpoint for the demo's first line.
func (s *sqsBackend) where() string {
	if s.stop != nil {
		return "an in-process SQS emulator (goaws at " + s.endpoint + "; --url https://sqs.<region>.amazonaws.com for AWS)"
	}
	return "SQS (" + s.endpoint + ")"
}
