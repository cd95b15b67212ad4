package kafka

import (
	"context"
	"fmt"
	"strings"

	"github.com/lily-mq/lily/transport"
)

// Difference is one way the cluster differs from the planned topics of a
// queue (Plan).
type Difference struct {
	// Queue is the queue the topic belongs to.
	Queue string `json:"queue"`
	// Topic is the topic's name.
	Topic string `json:"topic"`
	// Role is the topic's role in Plan: "main", "retry", "dlt" or
	// "attempts".
	Role string `json:"role"`
	// Kind is "missing", "partitions" or "config".
	Kind string `json:"kind"`
	// Key is the topic config that differs (Kind "config").
	Key string `json:"key,omitempty"`
	// Want is the planned value, Got the cluster's ("" when missing).
	Want string `json:"want,omitempty"`
	Got  string `json:"got,omitempty"`
	// Fix says what to do about it.
	Fix string `json:"fix"`
}

// String describes the difference on one line.
func (d Difference) String() string {
	switch d.Kind {
	case "missing":
		return fmt.Sprintf("topic %s (%s of %s): missing; %s", d.Topic, d.Role, d.Queue, d.Fix)
	case "partitions":
		return fmt.Sprintf("topic %s (%s of %s): %s partitions, want %s; %s", d.Topic, d.Role, d.Queue, d.Got, d.Want, d.Fix)
	}
	return fmt.Sprintf("topic %s (%s of %s): %s = %s, want %s; %s", d.Topic, d.Role, d.Queue, d.Key, d.Got, d.Want, d.Fix)
}

// Partitions returns the partition count of topic; a topic that does not
// exist is transport.ErrUnknownQueue.
func (t *Transport) Partitions(ctx context.Context, topic string) (int32, error) {
	t.forget(topic)
	return t.partitions(ctx, topic)
}

// Verify compares the topics of each queue, as Plan(spec, partitions)
// lists them (with the dead-letter topic Options.DeadLetterTopics names),
// with the cluster: every topic must exist; the main topic
// must have partitions partitions, and the queue's other topics as many
// as its main topic (so that a copy keeps its partition number); the
// configs Plan sets (the dead-letter topic's retention.ms, retention.bytes
// and segment.ms, the attempts topic's cleanup.policy) must have the
// planned values. It returns every
// difference (none: the topics are as planned).
func (t *Transport) Verify(ctx context.Context, specs []transport.QueueSpec, partitions int32) ([]Difference, error) {
	var names []string
	for _, s := range specs {
		for _, tp := range t.plan(s, partitions) {
			names = append(names, tp.Name)
		}
	}
	td, err := t.adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("kafka: describe topics: %w", err)
	}
	cfgs, err := t.adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("kafka: describe topic configs: %w", err)
	}
	var out []Difference
	for _, s := range specs {
		main := partitions
		if d, ok := td[s.Name]; ok && d.Err == nil {
			main = int32(len(d.Partitions))
		}
		for _, tp := range t.plan(s, partitions) {
			diff := Difference{Queue: s.Name, Topic: tp.Name, Role: tp.Role}
			d, ok := td[tp.Name]
			if !ok || d.Err != nil {
				diff.Kind, diff.Fix = "missing", "'lily topology apply' creates it"
				out = append(out, diff)
				continue
			}
			want := main
			fix := "create it again with as many partitions as " + s.Name + " (a copy goes to the partition with its original's number)"
			if tp.Role == "main" {
				want = partitions
				fix = fmt.Sprintf("set kafka_partitions = %d in the config to describe the topic as it is (Lily never changes an existing topic's partition count)", len(d.Partitions))
			}
			if got := int32(len(d.Partitions)); got != want {
				diff.Kind, diff.Want, diff.Got, diff.Fix = "partitions", fmt.Sprint(want), fmt.Sprint(got), fix
				out = append(out, diff)
			}
			rc, err := cfgs.On(tp.Name, nil)
			if err != nil || rc.Err != nil {
				continue // the topic exists; its configs could not be read
			}
			for key, want := range tp.Configs {
				got := ""
				for _, c := range rc.Configs {
					if c.Key == key && c.Value != nil {
						got = *c.Value
					}
				}
				if want != nil && !configMatches(key, *want, got) {
					c := diff
					c.Kind, c.Key, c.Want, c.Got = "config", key, *want, got
					c.Fix = fmt.Sprintf("kafka-configs --alter --entity-type topics --entity-name %s --add-config %s=%s", tp.Name, key, *want)
					if tp.Role == "dlt" {
						c.Fix = "'lily topology apply' sets it (the dead-letter topic's retention: kafka_dlt_retention_hours, kafka_dlt_retention_bytes); or " + c.Fix
					}
					out = append(out, c)
				}
			}
		}
	}
	return out, nil
}

// configMatches compares a topic config with its planned value;
// cleanup.policy is a list ("compact,delete" is compacted too).
func configMatches(key, want, got string) bool {
	if key == "cleanup.policy" {
		for _, p := range strings.Split(got, ",") {
			if strings.TrimSpace(p) == want {
				return true
			}
		}
		return false
	}
	return want == got
}
