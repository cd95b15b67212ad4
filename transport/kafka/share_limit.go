package kafka

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily/transport"
)

// Share-group settings Lily reads from the cluster.
const (
	// BrokerShareDeliveryLimit is the broker setting that bounds a
	// record's deliveries in a share group; past it the broker archives
	// the record (no copy anywhere). Kafka's default is 5.
	BrokerShareDeliveryLimit = "group.share.delivery.count.limit"
	// GroupShareDeliveryLimit is the same bound set on one share group
	// (newer brokers); it wins over the broker's when set.
	GroupShareDeliveryLimit = "share.delivery.count.limit"
	// BrokerShareLockDuration is the broker's acquisition lock duration.
	BrokerShareLockDuration = "group.share.record.lock.duration.ms"
	// GroupShareLockDuration is the same for one share group.
	GroupShareLockDuration = "share.record.lock.duration.ms"
)

// ShareSettings are a share group's delivery limit and lock duration as
// the cluster has them, and where each came from ("group", "broker" or
// "default" when the cluster reported neither).
type ShareSettings struct {
	DeliveryLimit       int
	DeliveryLimitSource string
	LockDuration        time.Duration
	LockDurationSource  string
}

// ShareSettings reads the delivery limit and lock duration that apply to
// share group group: the group's own setting when it has one (a config
// whose source is the group), else the brokers' — each broker is asked by
// its ID, since a request for "any broker" returns only the cluster-wide
// dynamic defaults, not what server.properties or a broker override set —
// taking the strictest (lowest) value, else Kafka's defaults (5, 30s).
func (t *Transport) ShareSettings(ctx context.Context, group string) (ShareSettings, error) {
	s := ShareSettings{DeliveryLimit: 5, DeliveryLimitSource: "default", LockDuration: 30 * time.Second, LockDurationSource: "default"}
	brokers, err := t.adm.ListBrokers(ctx)
	if err != nil {
		return s, fmt.Errorf("kafka: list brokers: %w", err)
	}
	rcs, err := t.adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
	if err != nil {
		return s, fmt.Errorf("kafka: describe broker configs (%s, %s): %w", BrokerShareDeliveryLimit, BrokerShareLockDuration, err)
	}
	limit, lock := 0, time.Duration(0)
	for _, rc := range rcs {
		if rc.Err != nil {
			return s, fmt.Errorf("kafka: describe configs of broker %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Value == nil {
				continue
			}
			switch c.Key {
			case BrokerShareDeliveryLimit:
				if n, ok := shareLimit(*c.Value); ok && (limit == 0 || n < limit) {
					limit = n
				}
			case BrokerShareLockDuration:
				if d, ok := shareLock(*c.Value); ok && (lock == 0 || d < lock) {
					lock = d
				}
			}
		}
	}
	if limit > 0 {
		s.DeliveryLimit, s.DeliveryLimitSource = limit, "broker"
	}
	if lock > 0 {
		s.LockDuration, s.LockDurationSource = lock, "broker"
	}
	grp, err := t.groupConfigs(ctx, group, GroupShareDeliveryLimit, GroupShareLockDuration)
	if err != nil {
		return s, nil // a broker without group configs: the brokers' apply
	}
	if n, ok := shareLimit(grp[GroupShareDeliveryLimit]); ok {
		s.DeliveryLimit, s.DeliveryLimitSource = n, "group"
	}
	if d, ok := shareLock(grp[GroupShareLockDuration]); ok {
		s.LockDuration, s.LockDurationSource = d, "group"
	}
	return s, nil
}

// shareLimit parses a delivery-count limit config value (a positive
// integer).
func shareLimit(v string) (int, bool) {
	n, err := strconv.Atoi(v)
	return n, err == nil && n > 0
}

// shareLock parses a lock-duration config value (positive milliseconds).
func shareLock(v string) (time.Duration, bool) {
	ms, err := strconv.ParseInt(v, 10, 64)
	return time.Duration(ms) * time.Millisecond, err == nil && ms > 0
}

// groupConfigs returns the values of keys set on the group itself (config
// source GROUP_CONFIG): a broker returns every group config, the unset
// ones filled in from its own defaults, which are not the group's.
func (t *Transport) groupConfigs(ctx context.Context, group string, keys ...string) (map[string]string, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeGroupConfig, group, keys
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, t.prod)
	if err != nil {
		return nil, fmt.Errorf("kafka: describe configs of group %s: %w", group, err)
	}
	out := map[string]string{}
	for _, res := range resp.Resources {
		if e := kerr.ErrorForCode(res.ErrorCode); e != nil {
			return nil, fmt.Errorf("kafka: describe configs of group %s: %w", group, e)
		}
		for _, c := range res.Configs {
			if c.Value != nil && *c.Value != "" && c.Source == kmsg.ConfigSourceGroupConfig {
				out[c.Name] = *c.Value
			}
		}
	}
	return out, nil
}

// checkShareGroup refuses (transport.ErrUnsafeQueue) a share-group queue
// whose delivery_limit is not below the broker's archive limit: the broker
// would archive a crash-type poison record — silently, no copy anywhere —
// before Lily could dead-letter it. It also warns when the cluster's lock
// is shorter than ShareLockDuration. Checked once per group.
func (t *Transport) checkShareGroup(ctx context.Context, spec transport.QueueSpec) error {
	t.mu.Lock()
	limit, ok := t.shareLimits[spec.ShareGroup]
	t.mu.Unlock()
	if !ok {
		s, err := t.ShareSettings(ctx, spec.ShareGroup)
		if err != nil {
			return fmt.Errorf("kafka: read the delivery limit of share group %s: %w", spec.ShareGroup, err)
		}
		if s.LockDuration < t.opts.ShareLockDuration {
			t.opts.Logger.Warn("kafka: the share group's lock is shorter than Options.ShareLockDuration; locks may run out before Lily renews them (set ShareLockDuration to the cluster's)",
				"group", spec.ShareGroup, "lock", s.LockDuration, "source", s.LockDurationSource, "share_lock_duration", t.opts.ShareLockDuration)
		}
		limit = s.DeliveryLimit
		t.mu.Lock()
		t.shareLimits[spec.ShareGroup] = limit
		t.mu.Unlock()
	}
	if spec.DeliveryLimit > 0 && spec.DeliveryLimit >= limit {
		return fmt.Errorf("kafka: queue %s: delivery_limit %d is not below share group %s's delivery limit %d (%s / %s): the broker would archive a record that keeps failing — silently, no copy anywhere — before Lily dead-letters it; "+
			"set delivery_limit to at most %d, or raise the limit on the cluster: %w",
			spec.Name, spec.DeliveryLimit, spec.ShareGroup, limit, GroupShareDeliveryLimit, BrokerShareDeliveryLimit, limit-1, transport.ErrUnsafeQueue)
	}
	return nil
}
