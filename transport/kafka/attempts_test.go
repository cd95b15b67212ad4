package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

// exerciseStore saves interleaved snapshots of several partitions — many
// more than one read window, so that the topic store must read backwards —
// and checks that each partition loads its last one, per group.
func exerciseStore(t *testing.T, s kafka.AttemptStore, queue string) {
	t.Helper()
	ctx := context.Background()
	main0 := kafka.TopicPartition{Topic: queue, Partition: 0}
	main1 := kafka.TopicPartition{Topic: queue, Partition: 1}
	retry0 := kafka.TopicPartition{Topic: kafka.RetryTopic(queue, 1000), Partition: 0}
	never := kafka.TopicPartition{Topic: queue, Partition: 2}
	if err := s.SaveAttempts(ctx, "g", queue, map[kafka.TopicPartition]kafka.Attempts{retry0: {7: 3}}); err != nil {
		t.Fatal(err)
	}
	var last0, last1 kafka.Attempts
	for i := range 700 { // 700 snapshots of partition 0 after the retry topic's only one
		last0 = kafka.Attempts{int64(i): 1, int64(i + 1): 2}
		snaps := map[kafka.TopicPartition]kafka.Attempts{main0: last0}
		if i%100 == 0 {
			last1 = kafka.Attempts{int64(i): int32(i/100 + 1)}
			snaps[main1] = last1
		}
		if err := s.SaveAttempts(ctx, "g", queue, snaps); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SaveAttempts(ctx, "other-group", queue, map[kafka.TopicPartition]kafka.Attempts{main0: {1: 9}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadAttempts(ctx, "g", queue, []kafka.TopicPartition{main0, main1, retry0, never})
	if err != nil {
		t.Fatal(err)
	}
	want := map[kafka.TopicPartition]kafka.Attempts{main0: last0, main1: last1, retry0: {7: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %v, want %v", got, want)
	}
	got, err = s.LoadAttempts(ctx, "other-group", queue, []kafka.TopicPartition{main0})
	if err != nil || !reflect.DeepEqual(got[main0], kafka.Attempts{1: 9}) {
		t.Errorf("other group loaded %v (%v)", got, err)
	}
}

func TestTopicAttemptStore(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	tr := open(t, c)
	queue := fmt.Sprintf("attempts.topic.%08x", rand.Uint32())
	if err := tr.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: queue, BucketsMillis: []int64{1000}}}}); err != nil {
		t.Fatal(err)
	}
	exerciseStore(t, tr.Attempts(), queue)
}

func TestSQLAttemptStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlitedb.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := kafka.SQLAttempts(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	exerciseStore(t, s, "attempts.sql")
}

func TestMemoryAttemptStore(t *testing.T) {
	t.Parallel()
	exerciseStore(t, kafka.MemoryAttempts(), "attempts.mem")
}
