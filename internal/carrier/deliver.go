package carrier

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// outcome of one platform of a ToUid task.
type outcome int

const (
	noSession outcome = iota // nobody online on the platform
	delivered                // the newest session got it (ACKed where asked)
	failed                   // sessions exist but the newest did not get it
)

// target is a session with the client of its boat.
type target struct {
	session.Session
	uid  string
	boat boatpb.BoatClient
}

// toUid delivers a task's messages to every online session of the target
// platforms; a platform counts as delivered when its newest session got them.
// Platforms not delivered keep their NEED_OFFLINE messages in the offline
// store; where the delivery failed but a boat still holds the platform's
// newest session, a replay is queued for that session so that the stored
// messages do not wait for a reconnect. Platforms whose delivery failed and
// whose messages were not all stored come back as a partial failure, to be
// retried alone. An error means a backend failed before the work could be
// sorted out: retry it all. It returns the task's receipts (none when
// receipts are off), for the caller to publish before the task is done.
func (c *Carrier) toUid(ctx context.Context, p *mqpb.Payload, t *mqpb.ToUid) (*partial, []*receiptpb.Receipt, error) {
	uid := t.GetUid()
	byPlatform, err := c.onlineTargets(ctx, uid, t.GetPlatforms())
	if err != nil {
		return nil, nil, err
	}
	results := make(map[string]outcome, len(t.GetPlatforms()))
	newest := make(map[string]*target, len(t.GetPlatforms()))
	var dirty []session.Session
	online := 0
	for _, pl := range t.GetPlatforms() {
		if len(byPlatform[pl]) > 0 {
			online++
		}
	}
	if online > 1 {
		dirty = c.deliverPlatforms(ctx, t, byPlatform, results, newest)
	} else { // the common case: no goroutine, nothing shared
		for _, pl := range t.GetPlatforms() {
			targets := byPlatform[pl]
			if len(targets) == 0 {
				results[pl] = noSession
				continue
			}
			var gone []session.Session
			results[pl], newest[pl], gone = c.deliverPlatform(ctx, targets, t.GetMsgs(), false)
			dirty = append(dirty, gone...)
		}
	}
	if len(dirty) > 0 {
		c.metrics.DirtySessions.Add(float64(len(dirty)))
		c.log.Info("removing sessions no boat holds", zap.String("uid", uid), zap.Int("sessions", len(dirty)))
		if err := c.sessions.Remove(ctx, uid, dirty...); err != nil {
			c.log.Warn("remove dirty sessions", zap.Error(err))
		}
	}

	var undelivered []string
	for _, pl := range t.GetPlatforms() {
		if results[pl] != delivered {
			undelivered = append(undelivered, pl)
		}
	}
	dropped, err := c.storeOfflineDropping(ctx, uid, undelivered, t.GetMsgs())
	if err != nil {
		return nil, nil, err
	}
	rs := c.deliverySteps(p, results, newest)
	for _, d := range dropped {
		if rs, err = c.expirySteps(ctx, rs, uid, d.Platform, d.Expired, "expired"); err != nil {
			return nil, nil, err
		}
		if rs, err = c.expirySteps(ctx, rs, uid, d.Platform, d.Trimmed, "over the per-user limit"); err != nil {
			return nil, nil, err
		}
	}
	if len(rs) > 0 && len(undelivered) > 0 && slices.ContainsFunc(t.GetMsgs(), needNotification) {
		// Horn's NOTIFIED follows these steps: publish them before the
		// notifications, so that a uid's receipts stay in order.
		if err := c.cfg.Receipts.Record(ctx, rs...); err != nil {
			return nil, nil, err
		}
		rs = nil
	}
	if err := c.queueReplays(ctx, p, uid, undelivered, results, newest, t.GetMsgs()); err != nil {
		return nil, nil, err
	}
	if err := c.notify(ctx, p, t, undelivered); err != nil {
		return nil, nil, err
	}
	needsAck := slices.ContainsFunc(t.GetMsgs(), asksAck)
	var retry []string
	for _, pl := range t.GetPlatforms() {
		switch {
		case results[pl] == delivered && needsAck:
			c.metrics.Deliveries.WithLabelValues(metrics.Acked).Inc()
		case results[pl] == delivered:
			c.metrics.Deliveries.WithLabelValues(metrics.Delivered).Inc()
		case results[pl] == failed && !c.storedAll(pl, t.GetMsgs()):
			retry = append(retry, pl) // counted as retried or dead-lettered
		case c.storable(pl, t.GetMsgs()):
			c.metrics.Deliveries.WithLabelValues(metrics.StoredOffline).Inc()
		default:
			c.metrics.Deliveries.WithLabelValues(metrics.Offline).Inc()
		}
		if results[pl] == delivered && len(t.GetMsgs()) > 0 {
			sent := time.UnixMilli(t.GetMsgs()[0].GetTimestamp())
			c.metrics.PushToDelivery.Observe(time.Since(sent).Seconds())
		}
	}
	if len(retry) == 0 {
		return nil, rs, nil
	}
	reduced := proto.Clone(p).(*mqpb.Payload)
	reduced.Body = &mqpb.Payload_ToUid{ToUid: &mqpb.ToUid{Uid: uid, Platforms: retry, Msgs: t.GetMsgs(),
		NotifyIfUnseenMs: t.GetNotifyIfUnseenMs()}} // its ACK cancels the notification
	return &partial{reason: fmt.Errorf("delivery failed on %v", retry), body: reduced, platforms: retry}, rs, nil
}

// deliverPlatforms is toUid's delivery to several online platforms at once:
// it fills results and newest per platform and returns the sessions their
// boats do not hold. It is apart from toUid because the goroutines' shared
// state would otherwise be allocated for every task, most of which reach one
// platform.
func (c *Carrier) deliverPlatforms(ctx context.Context, t *mqpb.ToUid, byPlatform map[string][]target,
	results map[string]outcome, newest map[string]*target) []session.Session {
	var (
		mu    sync.Mutex
		dirty []session.Session
		wg    sync.WaitGroup
	)
	for _, pl := range t.GetPlatforms() {
		targets := byPlatform[pl]
		if len(targets) == 0 {
			mu.Lock()
			results[pl] = noSession
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, tg, gone := c.deliverPlatform(ctx, targets, t.GetMsgs(), false)
			mu.Lock()
			results[pl] = res
			newest[pl] = tg
			dirty = append(dirty, gone...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return dirty
}

// onlineTargets reads the user's sessions, drops those of boats that are gone
// (removing them from Redis) and groups the rest by target platform, oldest
// first.
func (c *Carrier) onlineTargets(ctx context.Context, uid string, platforms []string) (map[string][]target, error) {
	all, err := c.sessions.List(ctx, uid)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]target)
	var dirty []session.Session
	for _, s := range all {
		if !slices.Contains(platforms, s.Platform) && s.BoatID != "" {
			continue
		}
		if s.BoatID == "" {
			dirty = append(dirty, s)
			continue
		}
		client, found, err := c.boats.Client(ctx, s.BoatID)
		if err != nil {
			return nil, err
		}
		if !found {
			dirty = append(dirty, s)
			continue
		}
		out[s.Platform] = append(out[s.Platform], target{Session: s, uid: uid, boat: client})
	}
	if err := c.orderByConnect(ctx, uid, out); err != nil {
		return nil, err
	}
	if len(dirty) > 0 {
		c.metrics.DirtySessions.Add(float64(len(dirty)))
		c.log.Info("removing sessions of boats gone from etcd", zap.String("uid", uid), zap.Int("sessions", len(dirty)))
		if err := c.sessions.Remove(ctx, uid, dirty...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// orderByConnect puts each platform's sessions in connect order, oldest
// first, where the platform has more than one: the newest session — whose
// delivery decides the platform's outcome — is the one station keeps when
// it kicks older ones, and that is the last connect, not the largest sid
// (sids come from different boats' clocks). One session per platform, the
// common case, costs no Redis call.
func (c *Carrier) orderByConnect(ctx context.Context, uid string, byPlatform map[string][]target) error {
	var order map[string]int64
	for _, targets := range byPlatform {
		if len(targets) < 2 {
			continue
		}
		if order == nil {
			var err error
			if order, err = c.sessions.ConnectOrder(ctx, uid); err != nil {
				return err
			}
		}
		sort.SliceStable(targets, func(i, j int) bool {
			return session.OlderConnect(order, targets[i].Sid, targets[j].Sid)
		})
	}
	return nil
}

// deliverPlatform pushes msgs to every session of one platform in parallel.
// It returns the platform's outcome, its newest session that a boat still
// holds (nil when there is none) and the sessions their boats do not hold.
func (c *Carrier) deliverPlatform(ctx context.Context, targets []target, msgs []*msgpb.Message, replay bool) (outcome, *target, []session.Session) {
	errs := make([]error, len(targets))
	if len(targets) == 1 { // the common case: no goroutine
		_, errs[0] = c.push(ctx, targets[0], msgs, replay)
	} else {
		var wg sync.WaitGroup
		for i, tg := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = c.push(ctx, tg, msgs, replay)
			}()
		}
		wg.Wait()
	}
	var gone []session.Session
	res := failed
	var newest *target
	for i := len(targets) - 1; i >= 0; i-- {
		if isNotHeld(errs[i]) {
			gone = append(gone, targets[i].Session)
			continue
		}
		if newest == nil {
			newest = &targets[i]
			if errs[i] == nil {
				res = delivered
			} else {
				c.log.Info("delivery to newest session failed", zap.String("sid", targets[i].Sid),
					zap.String("platform", targets[i].Platform), zap.Error(errs[i]))
			}
		}
	}
	return res, newest, gone
}

// push calls the boat with a deadline of AckWait plus CallTimeout. Waiting
// for a client's ACK takes no CPU: the consumer's worker is given back
// first (queue.Release), so clients slow to ACK hold no worker from other
// users; the user's own next task still waits for this one. A failed
// delivery goes on to store its messages and queue their replay, in a
// bounded number of places (queue.Resume): when a boat dies, every delivery
// it held fails at the same moment, and other users' deliveries would
// otherwise wait behind all of that work at once.
func (c *Carrier) push(ctx context.Context, tg target, msgs []*msgpb.Message, replay bool) ([]int64, error) {
	if slices.ContainsFunc(msgs, asksAck) {
		queue.Release(ctx)
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.AckWait+c.cfg.CallTimeout)
	defer cancel()
	resp, err := tg.boat.PushMessages(callCtx, &boatpb.PushMessagesRequest{
		Sid: tg.Sid, AckWait: c.ackWait, Msgs: msgs, Replay: replay})
	if err != nil {
		queue.Resume(ctx)
	}
	return resp.GetAckedSeqs(), err
}

// isNotHeld reports the boat saying it does not hold the session.
func isNotHeld(err error) bool {
	return status.Code(err) == codes.NotFound && grpcerr.DetailCode(err) == errorpb.Code_SESSION_NOT_FOUND
}

// storedAll reports whether every message is stored for the platform when
// it is offline.
func (c *Carrier) storedAll(pl string, msgs []*msgpb.Message) bool {
	p, ok := c.cfg.Platforms.Get(pl)
	return ok && p.Offline.Store && !slices.ContainsFunc(msgs, func(m *msgpb.Message) bool { return !needOffline(m) })
}

// storable reports whether any message would be stored for the platform.
func (c *Carrier) storable(pl string, msgs []*msgpb.Message) bool {
	p, ok := c.cfg.Platforms.Get(pl)
	if !ok || !p.Offline.Store {
		return false
	}
	return slices.ContainsFunc(msgs, needOffline)
}

func asksAck(m *msgpb.Message) bool {
	return m.GetOptions()&uint32(msgpb.Option_NEED_ACK) != 0
}

func needOffline(m *msgpb.Message) bool {
	return m.GetOptions()&uint32(msgpb.Option_NEED_OFFLINE) != 0
}

// storeOffline keeps the NEED_OFFLINE messages for the given platforms of one
// user, by each platform's policy, in one pipeline followed by one clean per
// platform. A message is stored whole (seq, options, body, timestamp).
func (c *Carrier) storeOffline(ctx context.Context, uid string, platforms []string, msgs []*msgpb.Message) error {
	_, err := c.storeOfflineDropping(ctx, uid, platforms, msgs)
	return err
}

// storeOfflineDropping is storeOffline returning what the store gave up
// unread to make room or for age.
func (c *Carrier) storeOfflineDropping(ctx context.Context, uid string, platforms []string, msgs []*msgpb.Message) ([]offline.Dropped, error) {
	var items []offline.Item
	bodies := make(map[int64][]byte)
	for _, pl := range platforms {
		p, ok := c.cfg.Platforms.Get(pl)
		if !ok || !p.Offline.Store {
			continue
		}
		for _, m := range msgs {
			if !needOffline(m) {
				continue
			}
			b, ok := bodies[m.GetSeq()]
			if !ok {
				var err error
				if b, err = proto.Marshal(m); err != nil {
					return nil, fmt.Errorf("marshal message %d: %w", m.GetSeq(), err)
				}
				bodies[m.GetSeq()] = b
			}
			items = append(items, offline.Item{Platform: pl, Policy: p.Offline,
				Msg: offline.Message{Seq: m.GetSeq(), Timestamp: m.GetTimestamp(), Body: b}})
		}
	}
	if len(items) == 0 {
		return nil, nil
	}
	// Tracked before the write: a message stored is never untracked (a
	// failed write leaves a tracked seq the store does not hold, harmless).
	if err := c.track(ctx, uid, items, msgs); err != nil {
		return nil, err
	}
	_, dropped, err := c.offline.WriteDropping(ctx, uid, items)
	return dropped, err
}
