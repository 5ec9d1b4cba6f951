package discovery

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/boatclient"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/outage"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/pb/boatpb"
)

// Boats is a live directory of the registered boats with one gRPC client per
// boat (a boatclient: deliveries share one stream per boat), fed by an etcd
// watch.
type Boats struct {
	cli    *clientv3.Client
	log    *zap.Logger
	prefix string
	dial   []grpc.DialOption

	// loadTimeout bounds one listing of the boats (default 5s); a failed
	// listing is tried again, it never ends Run.
	loadTimeout time.Duration

	mu    sync.Mutex
	boats map[string]*boatConn
}

type boatConn struct {
	addr   string
	conn   *grpc.ClientConn
	client boatpb.BoatClient
}

// NewBoats makes a directory; Run fills it.
func NewBoats(cli *clientv3.Client, log *zap.Logger, prefix string, dial ...grpc.DialOption) *Boats {
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), tracing.DialOption()}
	}
	return &Boats{cli: cli, log: log, prefix: BoatsPrefix(prefix), dial: dial, loadTimeout: 5 * time.Second, boats: make(map[string]*boatConn)}
}

// Run loads the current boats and follows changes until ctx ends. etcd
// errors are retried (one WARN when they begin, one INFO when they end): a
// carrier keeps its last directory meanwhile instead of stopping.
func (b *Boats) Run(ctx context.Context) error {
	defer b.closeAll()
	tr := outage.New(b.log, "etcd (boat directory)")
	for {
		var rev int64
		err := backoff.Retry(ctx, backoff.Default, func() error {
			lctx, cancel := context.WithTimeout(ctx, b.loadTimeout)
			defer cancel()
			var err error
			rev, err = b.load(lctx)
			return err
		}, func(err error, _ time.Duration) { tr.Fail(err) })
		if err != nil { // only when ctx ended
			return nil
		}
		tr.OK()
		wch := b.cli.Watch(clientv3.WithRequireLeader(ctx), b.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				b.log.Warn("boat watch interrupted", zap.Error(err))
				break
			}
			for _, ev := range resp.Events {
				id := strings.TrimPrefix(string(ev.Kv.Key), b.prefix)
				if ev.Type == clientv3.EventTypeDelete {
					b.remove(id)
				} else {
					b.set(id, string(ev.Kv.Value))
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

func (b *Boats) load(ctx context.Context) (int64, error) {
	resp, err := b.cli.Get(ctx, b.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("discovery: list boats: %w", err)
	}
	live := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		id := strings.TrimPrefix(string(kv.Key), b.prefix)
		live[id] = true
		b.set(id, string(kv.Value))
	}
	b.mu.Lock()
	var gone []string
	for id := range b.boats {
		if !live[id] {
			gone = append(gone, id)
		}
	}
	b.mu.Unlock()
	for _, id := range gone {
		b.remove(id)
	}
	return resp.Header.Revision, nil
}

func (b *Boats) set(id, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.boats[id]; ok {
		if old.addr == addr {
			return
		}
		_ = old.conn.Close()
	}
	conn, err := grpcx.Dial(addr, b.dial...)
	if err != nil {
		b.log.Error("bad boat address in etcd", zap.String("boat", id), zap.String("addr", addr), zap.Error(err))
		delete(b.boats, id)
		return
	}
	b.boats[id] = &boatConn{addr: addr, conn: conn, client: boatclient.New(conn)}
	b.log.Info("boat up", zap.String("boat", id), zap.String("addr", addr))
}

func (b *Boats) remove(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.boats[id]; ok {
		_ = old.conn.Close()
		delete(b.boats, id)
		b.log.Info("boat down", zap.String("boat", id))
	}
}

func (b *Boats) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, c := range b.boats {
		_ = c.conn.Close()
		delete(b.boats, id)
	}
}

// Client returns the client of a registered boat. A boat missing from the
// watched view is looked up in etcd directly before it is declared gone, so a
// boat that registered a moment ago is never mistaken for a dead one. found is
// false only when etcd says the boat is not registered.
func (b *Boats) Client(ctx context.Context, boatID string) (client boatpb.BoatClient, found bool, err error) {
	b.mu.Lock()
	c, ok := b.boats[boatID]
	b.mu.Unlock()
	if ok {
		return c.client, true, nil
	}
	resp, err := b.cli.Get(ctx, b.prefix+boatID)
	if err != nil {
		return nil, false, fmt.Errorf("discovery: look up boat %s: %w", boatID, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	b.set(boatID, string(resp.Kvs[0].Value))
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.boats[boatID]; ok {
		return c.client, true, nil
	}
	return nil, false, fmt.Errorf("discovery: boat %s has an unusable address", boatID)
}

// IDs lists the boats currently known.
func (b *Boats) IDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.boats))
	for id := range b.boats {
		ids = append(ids, id)
	}
	return ids
}
