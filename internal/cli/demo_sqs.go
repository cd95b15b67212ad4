package cli

import (
	"strings"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/sqs"
	sqsemu "github.com/lily-mq/lily/transport/sqs/sqstest"
)

// demoSQSVisibility is the demo's SQS visibility timeout: a dead worker's
// messages come back after it (SQS has no consumer connection whose death
// returns them at once), with their receive counts raised.
const demoSQSVisibility = 2

// demoSQS is the demo's SQS: an endpoint given with --url (http(s)://…),
// or the in-process emulator (goaws), which lives as long as the demo's
// parent process and listens on a real TCP port, so that the worker child
// processes reach it like any endpoint (the parent passes them --url).
type demoSQS struct {
	endpoint string
	query    bool
	emulated bool
	tr       *sqs.Transport
}

// openDemoSQS opens the SQS transport of conn: conn.url when it is an
// http(s) URL, else the in-process emulator.
func openDemoSQS(conn demoConn) (*demoSQS, error) {
	s := &demoSQS{endpoint: conn.url, query: conn.sqsQuery}
	if !strings.HasPrefix(conn.url, "http://") && !strings.HasPrefix(conn.url, "https://") {
		e, err := sqsemu.Start()
		if err != nil {
			return nil, err
		}
		s.endpoint, s.query, s.emulated = e.URL(), true, true
	}
	protocol := ""
	if s.query {
		protocol = "query"
	}
	vis := demoSQSVisibility
	o, err := brokers.SQSOptions(config.Config{SQSEndpoint: s.endpoint, SQSProtocol: protocol, SQSVisibilityTimeoutSeconds: &vis})
	if err != nil {
		return nil, err
	}
	if s.tr, err = sqs.Open(o); err != nil {
		return nil, err
	}
	return s, nil
}

// workerArgs are the worker's flags that reach the same endpoint.
func (s *demoSQS) workerArgs() []string {
	args := []string{"--url", s.endpoint}
	if s.query {
		args = append(args, "--sqs-query")
	}
	return args
}

// where describes the endpoint for the demo's first line.
func (s *demoSQS) where() string {
	if s.emulated {
		return "an in-process SQS emulator (goaws at " + s.endpoint + "; --url https://sqs.<region>.amazonaws.com for AWS)"
	}
	return "SQS (" + s.endpoint + ")"
}
