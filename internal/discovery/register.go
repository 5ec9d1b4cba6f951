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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
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

	mu      sync.Mutex // orders Leave against joining again
	session *concurrency.Session
	left    chan struct{} // closed by Leave
	// OnReregister runs after the lease was lost and the member is back (seed
	// 000's TODO: a boat cut off from etcd for a while must resend offline
	// messages to its sessions). Set before Run.
	OnReregister func(ctx context.Context)
}

var errLeft = errors.New("discovery: member left")

// ErrKeyTaken means another live process holds the registration key (two
// boats with one id, or the lease of a crashed previous run not yet expired).
var ErrKeyTaken = errors.New("discovery: key registered by another process")

// Join leases a node id and, when key is set, registers key → value. While
// another live process holds key, it waits (at most one lease TTL for a
// crashed previous run) and tries again until ctx ends.
func Join(ctx context.Context, cli *clientv3.Client, log *zap.Logger, prefix, name, key, value string, ttl time.Duration) (*Member, error) {
	m := &Member{cli: cli, log: log, prefix: prefix, name: name, key: key, value: value, ttl: ttl, left: make(chan struct{})}
	var node int
	var err error
	for {
		node, err = m.join(ctx)
		if !errors.Is(err, ErrKeyTaken) {
			break
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
	m.gen, err = idgen.New(node)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Member) join(ctx context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.left:
		return 0, errLeft
	default:
	}
	// The lease is granted under ctx, so that a stop (SIGTERM) ends a grant
	// that etcd does not answer. Once granted it lives until Leave (or the
	// process dies), not until ctx ends: a cancelled context must not look
	// like a lost lease.
	grant, err := m.cli.Grant(ctx, int64(m.ttl.Seconds()))
	if err != nil {
		return 0, fmt.Errorf("discovery: etcd lease: %w", err)
	}
	s, err := concurrency.NewSession(m.cli, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(m.ttl.Seconds())),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		m.revoke(grant.ID)
		return 0, fmt.Errorf("discovery: etcd lease: %w", err)
	}
	node, err := idgen.Claim(ctx, m.cli, m.prefix, s.Lease(), m.name)
	if err != nil {
		s.Orphan()
		m.revoke(s.Lease())
		return 0, err
	}
	if m.key != "" {
		resp, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", 0)).
			Then(clientv3.OpPut(m.key, m.value, clientv3.WithLease(s.Lease()))).
			Commit()
		if err != nil {
			s.Orphan()
			m.revoke(s.Lease())
			return 0, fmt.Errorf("discovery: register %s: %w", m.key, err)
		}
		if !resp.Succeeded {
			s.Orphan()
			m.revoke(s.Lease())
			return 0, ErrKeyTaken
		}
	}
	m.session = s
	m.log.Info("joined etcd", zap.String("key", m.key), zap.Int("node", node), zap.Int64("lease", int64(s.Lease())))
	return node, nil
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
		done := m.session.Done()
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
			node, err := m.join(ctx)
			if errors.Is(err, errLeft) {
				return backoff.Permanent(err)
			}
			if err != nil {
				return err
			}
			if err := m.gen.SetNode(node); err != nil {
				return backoff.Permanent(err)
			}
			return nil
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
	if m.session == nil {
		return nil
	}
	select {
	case <-m.left:
		return nil
	default:
		close(m.left)
	}
	if _, err := m.cli.Revoke(ctx, m.session.Lease()); err != nil {
		return fmt.Errorf("discovery: revoke lease: %w", err)
	}
	m.session.Orphan()
	return nil
}
