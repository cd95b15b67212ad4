package sqs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
)

// TestPlanVerify: the plan names the queue and its DLQ with the redrive
// policy (maxReceiveCount = delivery_limit + 1); Verify finds nothing
// after Declare, then reports a missing queue and a changed visibility
// timeout and redrive policy.
func TestPlanVerify(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	qc := declare(t, tr, "verify", lily.QueueConfig{DeliveryLimit: new(4)})
	plans, err := sqs.Plan([]transport.QueueSpec{qc.Spec()}, testLease)
	if err != nil || len(plans) != 2 {
		t.Fatalf("plan: %v %v", plans, err)
	}
	if !strings.Contains(plans[0].Attributes["RedrivePolicy"], `"maxReceiveCount":5`) || plans[1].Name != sqs.QueueName(qc.Name)+"-dlq" {
		t.Errorf("plan %+v: want maxReceiveCount 5 and DLQ %s-dlq", plans, sqs.QueueName(qc.Name))
	}
	diffs, err := tr.Verify(ctx, []transport.QueueSpec{qc.Spec()})
	if err != nil || len(diffs) != 0 {
		t.Fatalf("verify after declare: %v %v", diffs, err)
	}
	url, _ := tr.QueueURL(ctx, qc.Name)
	if _, err := tr.Client().SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{
		"VisibilityTimeout": "9", "RedrivePolicy": `{"maxReceiveCount":"3","deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:` + sqs.QueueName(qc.Name) + `-dlq"}`}}); err != nil {
		t.Fatal(err)
	}
	missing := lily.QueueConfig{Name: "verify-missing-queue", Transport: "sqs"}.WithDefaults()
	diffs, err = tr.Verify(ctx, []transport.QueueSpec{qc.Spec(), missing.Spec()})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range diffs {
		got = append(got, d.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{fmt.Sprintf("VisibilityTimeout = 9, want %d", int(testLease.Seconds())), "RedrivePolicy", "verify-missing-queue (for verify-missing-queue): missing", "verify-missing-queue-dlq"} {
		if !strings.Contains(all, want) {
			t.Errorf("differences\n%s\nlack %q", all, want)
		}
	}
}
