package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/pb/pushpb"
)

// othersLoad pushes to boat B's sessions at a fixed rate until stopped.
type othersLoad struct {
	pushed, errs atomic.Int64
	mu           sync.Mutex
	records      []pushed
	stop         context.CancelFunc
	done         sync.WaitGroup
}

func startOthersLoad(ctx context.Context, p *sessions, clients []pushpb.PushClient, platform string, rate float64, opts uint32) *othersLoad {
	l := &othersLoad{}
	lctx, stop := context.WithCancel(ctx)
	l.stop = stop
	interval := time.Duration(float64(time.Second) / rate)
	workers := max(8, min(256, int(rate/20)))
	var next atomic.Int64
	t0 := time.Now()
	for w := range workers {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			cl := clients[w%len(clients)]
			for {
				i := next.Add(1) - 1
				due := t0.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					select {
					case <-time.After(d):
					case <-lctx.Done():
						return
					}
				}
				if lctx.Err() != nil {
					return
				}
				target := int(i % int64(len(p.list)))
				seq, err := pushOne(ctx, cl, p.list[target].uid, platform, target, opts)
				if err != nil {
					l.errs.Add(1)
					continue
				}
				l.pushed.Add(1)
				l.mu.Lock()
				l.records = append(l.records, pushed{seq: seq, target: int32(target)})
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *othersLoad) end() []pushed {
	l.stop()
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records
}

// pushOne pushes one message to uid, its body naming target, and returns
// its seq.
func pushOne(ctx context.Context, cl pushpb.PushClient, uid, platform string, target int, opts uint32) (int64, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	resp, err := cl.Push(cctx, &pushpb.PushRequest{
		Uids:           []string{uid},
		PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{platform}},
		MsgBodies:      []*anypb.Any{encodeBody(time.Now().UnixNano(), target)},
		MsgOptions:     opts,
	})
	if err != nil {
		return 0, err
	}
	if len(resp.GetSeqs()) != 1 {
		return 0, fmt.Errorf("push to %s: %d seqs, want 1", uid, len(resp.GetSeqs()))
	}
	return resp.GetSeqs()[0], nil
}

// checkStored reconnects the held and stored users to boat B and waits
// until each got the message pushed to it (or the timeout).
func checkStored(ctx context.Context, o *Options, c *Cluster, boatB SpawnedBoat, a holder, d DisconnectOptions,
	want map[int64]int32, opts uint32, st *DisconnectStored) error {
	k := d.Held + d.Stored
	if k == 0 {
		return nil
	}
	uids := make([]string, k)
	for i := range k {
		uids[i] = a.uid(i)
	}
	start := time.Now()
	// Indices are boat A's, so a body naming its user is checked as such.
	r, err := openSessions(ctx, openConfig{ClientAddr: boatB.ClientAddr, TLS: c.ClientTLS, Secret: c.Secret, Platform: c.Platform,
		UIDs: uids, N: k, StreamsPerConn: 1, SourceSpread: o.SourceSpread, Timeout: o.ConnectTimeout, WaitReady: true, WantOptions: opts})
	if err != nil {
		return fmt.Errorf("reconnect boat A's users: %w", err)
	}
	defer r.close()
	st.Reconnected = k
	got := func() int64 {
		var n int64
		for _, s := range r.list {
			s.mu.Lock()
			for seq := range s.got {
				if t, ok := want[seq]; ok && int(t) == s.idx {
					n++
				}
			}
			s.mu.Unlock()
		}
		return n
	}
	_ = pollUntil(ctx, d.Timeout, func() (bool, error) { return got() >= int64(len(want)), nil })
	st.ReplaySeconds = time.Since(start).Seconds()
	records := make([]pushed, 0, len(want))
	for seq, t := range want {
		records = append(records, pushed{seq: seq, target: t})
	}
	var lr LoadResult
	lr.checkGroup(r, records)
	st.Received, st.Lost, st.Duplicates, st.Unexpected, st.WrongTarget = got(), lr.Missing, lr.Duplicates, lr.Unexpected, lr.WrongTarget
	o.logf("  stored: %d pushed (%d held, %d while gone), %d received on reconnect in %.2f s, lost %d, dup %d",
		st.Pushed, d.Held, d.Stored, st.Received, st.ReplaySeconds, st.Lost, st.Duplicates)
	return nil
}

// pushEach pushes one message to each user uid(from) … uid(to-1), by 32
// callers, after ready(i) says so (nil: at once; false: skipped, an
// error). It returns the seqs pushed, each with its target.
func pushEach(ctx context.Context, clients []pushpb.PushClient, uid func(int) string, from, to int, platform string, opts uint32,
	ready func(int) bool) (map[int64]int32, error) {
	out := make(map[int64]int32, to-from)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := from; i < to; i++ {
		g.Go(func() error {
			if ready != nil && !ready(i) {
				return fmt.Errorf("session %d: its stream did not end", i)
			}
			seq, err := pushOne(gctx, clients[i%len(clients)], uid(i), platform, i, opts)
			if err != nil {
				return fmt.Errorf("push to session %d: %w", i, err)
			}
			mu.Lock()
			out[seq] = int32(i)
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	return out, err
}

// pollUntil calls cond every 20 ms until it is true, fails, or timeout
// passes.
func pollUntil(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// redisPid is the pid of the cluster's redis-server when the tool started
// it; 0 otherwise.
func redisPid(c *Cluster) int {
	for _, s := range c.Services {
		if s.Name == "redis" {
			return s.Pid
		}
	}
	return 0
}
