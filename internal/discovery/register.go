// Package discovery keeps boats findable: each boat puts
// <prefix>/boats/<boat_id> → its internal gRPC address in etcd under a lease it
// keeps alive, and station and carrier watch that prefix.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/internal/outage"
)

// BoatsPrefix is where boats register, below the cluster prefix.
func BoatsPrefix(prefix string) string { return prefix + "/boats/" }

// BoatKey is one boat's registration key.
func BoatKey(prefix, boatID string) string { return BoatsPrefix(prefix) + boatID }

// Member is a process's presence in etcd: a lease kept alive, an optional key
// (a boat's registration) and a node id for its id generator.
type Member struct {
	cli    *clientv3.Client
	log    *zap.Logger
	prefix string
	name   string
	key    string // empty: no registration, only a node id
	value  string
	ttl    time.Duration

	gen *idgen.Generator

	mu    sync.Mutex // orders Leave against joining again
	lease clientv3.LeaseID
	claim uint64        // the generator's claim on the node id under lease
	lost  chan struct{} // closed when the lease is (or may be) lost
	stop  context.CancelFunc
	ended chan struct{} // closed when the keepalive loop returned
	left  chan struct{} // closed by Leave
	// OnReregister runs after the lease was lost and the member is back (a
	// boat cut off from etcd for a while must resend offline messages to
	// its sessions). Set before Run.
	OnReregister func(ctx context.Context)

	// Whether the claim is held (see Watch).
	hmu     sync.Mutex
	lapsed  bool
	gone    bool        // left: no more hooks
	expiry  *time.Timer // fires at the claim's deadline
	epoch   uint64      // counts deadlines set, so a stale expiry does nothing
	onLapse func()
	onHold  func()

	// dead, when set, says a value registered under key is a gone
	// process's (see TakeOver).
	dead func(value string) bool
}

var errLeft = errors.New("discovery: member left")

// ErrKeyTaken means another live process holds the registration key (two
// boats with one id, or the lease of a crashed previous run not yet expired).
var ErrKeyTaken = errors.New("discovery: key registered by another process")

// TakeOver is a Join option: when key is held and dead says the value
// registered under it belongs to a process known to be gone, the lease
// holding it is revoked at once instead of waited out. A boat restarted
// after a crash uses it for its own address: it could bind that address,
// so the process that registered it no longer listens there.
func TakeOver(dead func(value string) bool) JoinOption {
	return func(m *Member) { m.dead = dead }
}

// JoinOption changes how Join registers.
type JoinOption func(*Member)

// Join leases a node id and, when key is set, registers key → value. While
// another live process holds key, it waits (at most one lease TTL for a
// crashed previous run) and tries again until ctx ends.
func Join(ctx context.Context, cli *clientv3.Client, log *zap.Logger, prefix, name, key, value string, ttl time.Duration, opts ...JoinOption) (*Member, error) {
	m := &Member{cli: cli, log: log, prefix: prefix, name: name, key: key, value: value, ttl: ttl,
		left: make(chan struct{}), gen: idgen.NewFenced()}
	for _, o := range opts {
		o(m)
	}
	var err error
	tookOver := false
	for {
		err = m.join(ctx)
		if !errors.Is(err, ErrKeyTaken) {
			break
		}
		if !tookOver { // once: a key taken again is waited out
			took, terr := m.takeOver(ctx)
			if terr != nil {
				log.Warn("registration key held by another process; could not take it over", zap.String("key", key), zap.Error(terr))
			}
			if tookOver = took; took {
				continue
			}
		}
		log.Warn("registration key held by another process; waiting for it to expire", zap.String("key", key))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s", ErrKeyTaken, key)
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// takeOver revokes the lease holding key when m.dead says the value under
// it is a gone process's; took says it did (or the key is free already).
func (m *Member) takeOver(ctx context.Context) (took bool, err error) {
	if m.dead == nil {
		return false, nil
	}
	resp, err := m.cli.Get(ctx, m.key)
	if err != nil {
		return false, err
	}
	if len(resp.Kvs) == 0 {
		return true, nil
	}
	kv := resp.Kvs[0]
	if !m.dead(string(kv.Value)) {
		return false, nil
	}
	if _, err := m.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return false, err
	}
	m.log.Warn("registration key held by a previous run that is gone; revoked its lease", zap.String("key", m.key),
		zap.String("value", string(kv.Value)))
	return true, nil
}

// Fencing: etcd expires a lease no sooner than its TTL after the last
// keepalive it processed, and it processed each one after the member sent
// it. So the node id is surely held until (send time of the last answered
// keepalive or grant) + TTL; the generator mints ids only until that instant
// minus fenceMargin (TTL/3), which absorbs clock-rate differences and the
// skew between this host's clock and the next claimant's (ids carry their
// time: the next holder of the node id mints ids timed after the lease
// expired). Keepalives go every TTL/6, so one slow or lost keepalive does
// not fence a healthy member.
func fenceMargin(ttl time.Duration) time.Duration { return ttl / 3 }

func keepAliveEvery(ttl time.Duration) time.Duration { return ttl / 6 }

func (m *Member) join(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.left:
		return errLeft
	default:
	}
	// The lease is granted under ctx, so that a stop (SIGTERM) ends a grant
	// that etcd does not answer. Once granted it lives until Leave (or the
	// process dies), not until ctx ends: a cancelled context must not look
	// like a lost lease.
	sent := time.Now()
	grant, err := m.cli.Grant(ctx, int64(m.ttl.Seconds()))
	if err != nil {
		return fmt.Errorf("discovery: etcd lease: %w", err)
	}
	ttl := time.Duration(grant.TTL) * time.Second
	node, err := idgen.Claim(ctx, m.cli, m.prefix, grant.ID, m.name)
	if err != nil {
		m.revoke(grant.ID)
		return err
	}
	if m.key != "" {
		resp, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", 0)).
			Then(clientv3.OpPut(m.key, m.value, clientv3.WithLease(grant.ID))).
			Commit()
		if err != nil {
			m.revoke(grant.ID)
			return fmt.Errorf("discovery: register %s: %w", m.key, err)
		}
		if !resp.Succeeded {
			m.revoke(grant.ID)
			return ErrKeyTaken
		}
	}
	claim, err := m.gen.Hold(node, sent.Add(ttl-fenceMargin(ttl)))
	if err != nil {
		m.revoke(grant.ID)
		return err
	}
	m.held(sent.Add(ttl - fenceMargin(ttl)))
	kctx, stop := context.WithCancel(context.Background())
	m.lease, m.claim, m.lost, m.stop, m.ended = grant.ID, claim, make(chan struct{}), stop, make(chan struct{})
	go func(lost, ended chan struct{}) {
		defer close(ended)
		m.keepAlive(kctx, grant.ID, claim, ttl, lost)
	}(m.lost, m.ended)
	m.log.Info("joined etcd", zap.String("key", m.key), zap.Int("node", node), zap.Int64("lease", int64(grant.ID)))
	return nil
}

// keepAlive renews lease every TTL/6 (sooner after a failure) and moves the
// claim's deadline forward with each answer. When etcd says the lease is
// gone, it fences the claim, closes lost (Run joins again) and returns.
func (m *Member) keepAlive(ctx context.Context, lease clientv3.LeaseID, claim uint64, ttl time.Duration, lost chan struct{}) {
	every := keepAliveEvery(ttl)
	wait := every
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		resp, err := m.cli.KeepAliveOnce(rctx, lease)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			ttl = time.Duration(resp.TTL) * time.Second
			m.gen.Extend(claim, sent.Add(ttl-fenceMargin(ttl)))
			m.held(sent.Add(ttl - fenceMargin(ttl)))
			wait = every
			continue
		case !errors.Is(err, rpctypes.ErrLeaseNotFound):
			// Unreachable etcd: keep trying; the deadline fences meanwhile.
			m.log.Warn("etcd keepalive failed", zap.Error(err))
			wait = every / 2
			continue
		}
		m.gen.Fence(claim)
		m.log.Warn("etcd lease lost; no ids until it is claimed again", zap.Error(err), zap.Int64("lease", int64(lease)))
		m.lapse()
		close(lost)
		return
	}
}

// revoke gives a lease back that will not be used, so that it does not hold
// anything until its TTL runs out.
func (m *Member) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = m.cli.Revoke(ctx, id)
}

// IDs returns the member's id generator.
func (m *Member) IDs() *idgen.Generator { return m.gen }

// Run keeps the membership until ctx ends: when the lease is lost it joins
// again (retrying with backoff) and calls OnReregister.
func (m *Member) Run(ctx context.Context) error {
	for {
		m.mu.Lock()
		done := m.lost
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-m.left:
			return nil
		case <-done:
		}
		select {
		case <-m.left:
			return nil
		default:
		}
		lease := outage.New(m.log, "etcd lease")
		lease.Fail(errors.New("etcd lease lost; joining again"))
		err := backoff.Retry(ctx, backoff.Default, func() error {
			err := m.join(ctx)
			if errors.Is(err, errLeft) {
				return backoff.Permanent(err)
			}
			return err
		}, func(err error, _ time.Duration) { lease.Fail(err) })
		switch {
		case errors.Is(err, errLeft) || ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		}
		lease.OK()
		if m.OnReregister != nil {
			m.OnReregister(ctx)
		}
	}
}

// Leave revokes the lease, which removes the registration and frees the node
// id at once. A boat leaves first when it shuts down.
func (m *Member) Leave(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop == nil {
		return nil
	}
	select {
	case <-m.left:
		return nil
	default:
		close(m.left)
	}
	// No id is minted from here on: the node id is free once revoked.
	m.hmu.Lock()
	m.gone = true
	if m.expiry != nil {
		m.expiry.Stop()
	}
	m.hmu.Unlock()
	m.stop()
	<-m.ended
	m.gen.Fence(m.claim)
	if _, err := m.cli.Revoke(ctx, m.lease); err != nil {
		return fmt.Errorf("discovery: revoke lease: %w", err)
	}
	return nil
}

// Watch sets the hooks that follow the member's claim on its node id and
// registration key: lapse runs once the claim may have lapsed — the deadline
// the id generator is fenced at passed (etcd unanswered for TTL − TTL/3
// since the last answered keepalive was sent, at least TTL/3 before etcd can
// expire the lease and another process take the key), or etcd said the lease
// is gone; hold runs when the claim is held again (a keepalive answered in
// time after all, or the member joined again). They alternate, starting with
// lapse, are called one at a time and must not block or call the member.
// If the claim has lapsed already, lapse runs before Watch returns.
func (m *Member) Watch(lapse, hold func()) {
	m.hmu.Lock()
	defer m.hmu.Unlock()
	m.onLapse, m.onHold = lapse, hold
	if m.lapsed && m.onLapse != nil {
		m.onLapse()
	}
}

// held records that the claim holds until deadline.
func (m *Member) held(deadline time.Time) {
	m.hmu.Lock()
	defer m.hmu.Unlock()
	if m.gone {
		return
	}
	if m.expiry != nil {
		m.expiry.Stop()
	}
	m.epoch++
	epoch := m.epoch
	m.expiry = time.AfterFunc(time.Until(deadline), func() {
		m.hmu.Lock()
		defer m.hmu.Unlock()
		if epoch == m.epoch { // not moved by a later keepalive
			m.lapseLocked()
		}
	})
	if m.lapsed {
		m.lapsed = false
		if m.onHold != nil {
			m.onHold()
		}
	}
}

// lapse records that the claim may have lapsed.
func (m *Member) lapse() {
	m.hmu.Lock()
	defer m.hmu.Unlock()
	m.lapseLocked()
}

func (m *Member) lapseLocked() {
	if m.gone || m.lapsed {
		return
	}
	m.lapsed = true
	if m.expiry != nil {
		m.expiry.Stop()
	}
	if m.onLapse != nil {
		m.onLapse()
	}
}
