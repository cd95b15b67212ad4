package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
)

// sqsOptions are the transport options of a configuration's sqs queues.
// Credentials come from the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); an endpoint without them (an
// emulator) gets placeholder credentials.
func sqsOptions(c config.Config) (sqs.Options, error) {
	region := c.SQSRegion
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	if region == "" && c.SQSEndpoint != "" {
		region = "us-east-1"
	}
	if region == "" {
		return sqs.Options{}, usagef(`sqs: no region: set sqs_region in the config (e.g. sqs_region = "eu-west-1") or AWS_REGION`)
	}
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if key == "" || secret == "" {
		if c.SQSEndpoint == "" {
			return sqs.Options{}, usagef("sqs: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones) in the environment")
		}
		key, secret = "lily", "lily"
	}
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN"), Source: "environment"}
	return sqs.Options{
		Config:   aws.Config{Region: region, Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil })},
		Endpoint: c.SQSEndpoint, QueryProtocol: c.SQSProtocol == "query", QueueURLs: c.SQSQueueURLs,
		VisibilityTimeout: c.SQSVisibilityTimeout(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, nil
}

// sqsTransport returns the SQS transport of the configuration (opened on
// first use).
func (b *brokers) sqsTransport(context.Context) (*sqs.Transport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sqsT == nil {
		o, err := sqsOptions(b.cfg)
		if err != nil {
			return nil, err
		}
		t, err := sqs.Open(o)
		if err != nil {
			return nil, fmt.Errorf("sqs: %w", err)
		}
		b.sqsT = t
	}
	return b.sqsT, nil
}

// sqsTarget returns the SQS transport for a redrive to q after checking
// that its queue still exists.
func sqsTarget(ctx context.Context, brk *brokers, q lily.QueueConfig) (catalog.Publisher, error) {
	t, err := brk.forQueue(ctx, q)
	if err != nil {
		return nil, err
	}
	if _, err := t.(*sqs.Transport).QueueURL(ctx, q.Name); err != nil {
		if errors.Is(err, transport.ErrUnknownQueue) {
			return nil, fmt.Errorf("SQS queue %q (SQS name %s) no longer exists: %w (create it again with 'lily topology apply', or discard its entries)",
				q.Name, sqs.QueueName(q.Name), transport.ErrUnknownQueue)
		}
		return nil, fmt.Errorf("check SQS queue %q: %w", q.Name, err)
	}
	return t, nil
}

// lintLiveSQS runs the SQS live checks of the configuration's sqs queues;
// false when it has none.
func lintLiveSQS(ctx context.Context, cfg config.Config) ([]lint.Finding, bool, error) {
	has := false
	for _, q := range cfg.Queues {
		has = has || q.Transport == lily.TransportSQS
	}
	if !has {
		return nil, false, nil
	}
	b, err := newBrokers(cfg, "", "")
	if err != nil {
		return nil, true, err
	}
	defer b.Close()
	t, err := b.sqsTransport(ctx)
	if err != nil {
		return nil, true, err
	}
	states, err := lint.ReadSQS(ctx, cfg, t)
	if err != nil {
		return nil, true, fmt.Errorf("lint --live: %w", err)
	}
	return lint.CheckSQS(cfg, states), true, nil
}
