package brokers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
)

// SettingsError reports a setting a broker needs that neither the
// configuration nor the environment gives, such as an SQS region or AWS
// credentials: the caller's input is wrong, not the broker ('lily' exits
// 2 on it, as on a bad flag).
type SettingsError struct {
	Msg string
}

func (e *SettingsError) Error() string { return e.Msg }

// SQSOptions are the transport options of a configuration's sqs queues.
// The region is sqs_region, else AWS_REGION or AWS_DEFAULT_REGION, else
// us-east-1 with an sqs_endpoint. Credentials come from the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); an
// endpoint without them (an emulator) gets placeholder credentials. A
// missing region or credentials is a *SettingsError.
func SQSOptions(c config.Config) (sqs.Options, error) {
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
		return sqs.Options{}, &SettingsError{Msg: `sqs: no region: set sqs_region in the config (e.g. sqs_region = "eu-west-1") or AWS_REGION`}
	}
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if key == "" || secret == "" {
		if c.SQSEndpoint == "" {
			return sqs.Options{}, &SettingsError{Msg: "sqs: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones) in the environment"}
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

// SQS returns the set's SQS transport, opened on first use.
func (s *Set) SQS(context.Context) (*sqs.Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sqsT == nil {
		o, err := SQSOptions(s.cfg)
		if err != nil {
			return nil, err
		}
		t, err := sqs.Open(o)
		if err != nil {
			return nil, fmt.Errorf("sqs: %w", err)
		}
		s.sqsT = t
	}
	return s.sqsT, nil
}

// SQSTarget returns the SQS transport for a redrive to the sqs queue q
// after checking that the queue still exists: an error names the queue and
// wraps transport.ErrUnknownQueue when it does not.
func (s *Set) SQSTarget(ctx context.Context, q lily.QueueConfig) (Transport, error) {
	t, err := s.ForQueue(ctx, q)
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
