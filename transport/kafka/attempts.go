package kafka

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	// Topic is the topic's name.
	Topic string
	// Partition is the partition number.
	Partition int32
}

// Attempts maps the offsets of one partition to how many times the record
// at that offset was handed to a handler without being settled (the
// delivery count of its last hand-out).
type Attempts map[int64]int32

// AttemptStore is the persistent attempt counter (docs/design.md §8), shared by a
// consumer group. Before Receive hands records out, the owner of their
// partition saves the partition's snapshot — every record of it handed out
// and not settled yet, with its count — and returns the records only after
// the store confirmed. A member that takes the partition over (after a
// crash or a rebalance) loads the last snapshot and continues the counts.
//
// Implementations must make SaveAttempts durable before returning and
// LoadAttempts return, per partition, the snapshot of the last successful
// SaveAttempts (nil when there was none).
type AttemptStore interface {
	// LoadAttempts returns the last saved snapshot of each partition.
	// queue is the main topic the partitions belong to (the partitions are
	// of it or of its retry topics).
	LoadAttempts(ctx context.Context, group, queue string, parts []TopicPartition) (map[TopicPartition]Attempts, error)
	// SaveAttempts replaces the snapshots of the given partitions,
	// durably, all or nothing as far as the store allows.
	SaveAttempts(ctx context.Context, group, queue string, snaps map[TopicPartition]Attempts) error
}

// snapshotVersion is the first byte of an encoded snapshot.
const snapshotVersion = 1

// encodeAttempts writes a snapshot compactly: version, count, then per
// offset (ascending) the delta to the previous offset and the count, as
// unsigned varints.
func encodeAttempts(a Attempts) []byte {
	offs := make([]int64, 0, len(a))
	for o := range a {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	b := make([]byte, 0, 2+len(offs)*4)
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, uint64(len(offs)))
	var prev int64
	for i, o := range offs {
		if i == 0 {
			b = binary.AppendUvarint(b, uint64(o))
		} else {
			b = binary.AppendUvarint(b, uint64(o-prev))
		}
		prev = o
		b = binary.AppendUvarint(b, uint64(a[o]))
	}
	return b
}

// decodeAttempts reads what encodeAttempts wrote.
func decodeAttempts(b []byte) (Attempts, error) {
	if len(b) == 0 {
		return Attempts{}, nil
	}
	if b[0] != snapshotVersion {
		return nil, fmt.Errorf("kafka: attempts snapshot version %d: this Lily reads version %d", b[0], snapshotVersion)
	}
	b = b[1:]
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, errors.New("kafka: truncated attempts snapshot")
		}
		b = b[n:]
		return v, nil
	}
	n, err := next()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(b)) {
		return nil, errors.New("kafka: corrupt attempts snapshot")
	}
	a := make(Attempts, n)
	var off int64
	for i := uint64(0); i < n; i++ {
		d, err := next()
		if err != nil {
			return nil, err
		}
		c, err := next()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			off = int64(d)
		} else {
			off += int64(d)
		}
		a[off] = int32(c)
	}
	return a, nil
}

// MemoryAttempts returns an attempt store that keeps the counts in this
// process only. It does not survive a crash: a record that kills the
// process starts again at delivery count 1 in the next one. It exists to
// measure the cost of the persistent counter and for tests; never use it
// where a crash-type poison can occur.
func MemoryAttempts() AttemptStore { return &memoryAttempts{m: map[string][]byte{}} }

type memoryAttempts struct {
	mu sync.Mutex
	m  map[string][]byte
}

func memKey(group string, tp TopicPartition) string {
	return group + "\x00" + tp.Topic + "\x00" + fmt.Sprint(tp.Partition)
}

// LoadAttempts implements AttemptStore.
func (s *memoryAttempts) LoadAttempts(_ context.Context, group, _ string, parts []TopicPartition) (map[TopicPartition]Attempts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[TopicPartition]Attempts, len(parts))
	for _, tp := range parts {
		if b, ok := s.m[memKey(group, tp)]; ok {
			a, err := decodeAttempts(b)
			if err != nil {
				return nil, err
			}
			out[tp] = a
		}
	}
	return out, nil
}

// SaveAttempts implements AttemptStore.
func (s *memoryAttempts) SaveAttempts(_ context.Context, group, _ string, snaps map[TopicPartition]Attempts) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tp, a := range snaps {
		s.m[memKey(group, tp)] = encodeAttempts(a)
	}
	return nil
}

// SQLAttempts returns an attempt store in a SQLite database, e.g. the
// catalog's (catalog.Store.DB()): one row per group and partition in the
// table lily_kafka_attempts, created if needed, each save one transaction.
// Every consumer of the group must reach the same database file, so it
// suits consumers on one machine; the default topic store suits any.
func SQLAttempts(ctx context.Context, db *sql.DB) (AttemptStore, error) {
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS lily_kafka_attempts (
		grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
		snapshot BLOB NOT NULL, updated_at INTEGER NOT NULL,
		PRIMARY KEY (grp, topic, part))`)
	if err != nil {
		return nil, fmt.Errorf("kafka: create lily_kafka_attempts: %w", err)
	}
	return &sqlAttempts{db: db}, nil
}

type sqlAttempts struct{ db *sql.DB }

// LoadAttempts implements AttemptStore: one query per partition.
func (s *sqlAttempts) LoadAttempts(ctx context.Context, group, _ string, parts []TopicPartition) (map[TopicPartition]Attempts, error) {
	out := make(map[TopicPartition]Attempts, len(parts))
	for _, tp := range parts {
		var b []byte
		err := s.db.QueryRowContext(ctx, `SELECT snapshot FROM lily_kafka_attempts WHERE grp = ? AND topic = ? AND part = ?`,
			group, tp.Topic, tp.Partition).Scan(&b)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kafka: load attempts of %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		a, err := decodeAttempts(b)
		if err != nil {
			return nil, err
		}
		out[tp] = a
	}
	return out, nil
}

// SaveAttempts implements AttemptStore: one transaction, one upsert per
// partition.
func (s *sqlAttempts) SaveAttempts(ctx context.Context, group, _ string, snaps map[TopicPartition]Attempts) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("kafka: save attempts: %w", err)
	}
	defer tx.Rollback()
	now := time.Now().UnixMilli()
	for tp, a := range snaps {
		if _, err := tx.ExecContext(ctx, `INSERT INTO lily_kafka_attempts (grp, topic, part, snapshot, updated_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (grp, topic, part) DO UPDATE SET snapshot = excluded.snapshot, updated_at = excluded.updated_at`,
			group, tp.Topic, tp.Partition, encodeAttempts(a), now); err != nil {
			return fmt.Errorf("kafka: save attempts of %s/%d: %w", tp.Topic, tp.Partition, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("kafka: save attempts: %w", err)
	}
	return nil
}
