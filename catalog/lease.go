package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// ErrLeaseLost is returned by work fenced by a lease (IngestParams.Lease)
// when the lease is no longer held by the caller: another process took it
// over after it expired. Nothing of the work was committed.
var ErrLeaseLost = errors.New("catalog: lease lost")

// Lease is one row of lily_leases.
type Lease struct {
	Name    string    `json:"name"`
	Holder  string    `json:"holder"`
	Expires time.Time `json:"expires_at"`
}

// LeaseHolder returns a holder name unique to this process and call: the
// host name, the process ID and 8 random bytes, e.g.
// "web-1/4711/3f2a9c0d1e2b4a5c". Two stores in one process get different
// names from two calls.
func LeaseHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b)
}

// TakeLease takes the lease name for holder until now+ttl, in one
// conditional statement: it succeeds when nobody holds the lease, when it
// expired (its holder stopped renewing it, e.g. died), or when holder
// holds it already (then it is renewed). It reports whether holder holds
// the lease now.
//
// Times come from the caller's clock: processes sharing a catalog must
// have clocks closer than ttl (NTP keeps them within milliseconds).
func (s *Store) TakeLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time) (bool, error) {
	if err := checkLease(name, holder, ttl); err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO lily_leases (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE lily_leases.holder = excluded.holder OR lily_leases.expires_at <= ?`,
		name, holder, now.Add(ttl).UnixMilli(), now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("catalog: take lease %q for %s: %w", name, holder, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("catalog: take lease %q: %w", name, err)
	}
	return n == 1, nil
}

// RenewLease extends a lease holder still holds (not expired) to now+ttl,
// in one conditional statement. It reports false when the lease expired
// or another holder has it: the caller must stop the work it guards (and
// may TakeLease again).
func (s *Store) RenewLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time) (bool, error) {
	if err := checkLease(name, holder, ttl); err != nil {
		return false, err
	}
	return renewLease(ctx, s.db, name, holder, ttl, now)
}

func renewLease(ctx context.Context, db catalogdb.Querier, name, holder string, ttl time.Duration, now time.Time) (bool, error) {
	res, err := db.ExecContext(ctx, `UPDATE lily_leases SET expires_at = ?
		WHERE name = ? AND holder = ? AND expires_at > ?`,
		now.Add(ttl).UnixMilli(), name, holder, now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("catalog: renew lease %q for %s: %w", name, holder, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("catalog: renew lease %q: %w", name, err)
	}
	return n == 1, nil
}

// ReleaseLease gives up a lease holder holds, so that another process
// takes it at once instead of after its expiry, and reports whether
// holder held it. Releasing a lease held by another holder (or by nobody)
// does nothing.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM lily_leases WHERE name = ? AND holder = ?`, name, holder)
	if err != nil {
		return false, fmt.Errorf("catalog: release lease %q for %s: %w", name, holder, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("catalog: release lease %q: %w", name, err)
	}
	return n == 1, nil
}

// Leases returns the leases whose names start with prefix ("" for all),
// expired ones included, by name.
func (s *Store) Leases(ctx context.Context, prefix string) ([]Lease, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, holder, expires_at FROM lily_leases
		WHERE substr(name, 1, ?) = ? ORDER BY name`, len(prefix), prefix)
	if err != nil {
		return nil, fmt.Errorf("catalog: list leases: %w", err)
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		var l Lease
		var at int64
		if err := rows.Scan(&l.Name, &l.Holder, &at); err != nil {
			return nil, fmt.Errorf("catalog: list leases: %w", err)
		}
		l.Expires = time.UnixMilli(at).UTC()
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: list leases: %w", err)
	}
	return out, nil
}

func checkLease(name, holder string, ttl time.Duration) error {
	switch {
	case name == "":
		return errors.New("catalog: lease: empty name")
	case holder == "":
		return fmt.Errorf("catalog: lease %q: empty holder (use catalog.LeaseHolder())", name)
	case ttl < time.Millisecond:
		return fmt.Errorf("catalog: lease %q: ttl %s: must be at least 1ms", name, ttl)
	}
	return nil
}
