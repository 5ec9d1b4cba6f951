package clusterchaos

// TEMPORARY: plain-command stand-ins in the cluster layout, to build the
// machinery before offline-cluster and sessions-cluster land. Removed once
// the real stores are merged.

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/session"
)

var standinWrite = redis.NewScript(`
if redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[2], ARGV[3])
return 1`)

var standinDelete = redis.NewScript(`
local removed = 0
for i = 1, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    removed = removed + 1
    if redis.call('DECR', KEYS[2*i+1]) <= 0 then
      redis.call('DEL', KEYS[2*i], KEYS[2*i+1])
    end
  end
end
return removed`)

type standinOffline struct{ rdb redis.UniversalClient }

func (s standinOffline) Write(ctx context.Context, uid string, items []offline.Item) (int, error) {
	l := rkeys.Cluster
	added := 0
	for _, it := range items {
		n, err := standinWrite.Run(ctx, s.rdb,
			[]string{l.Offline(uid, it.Platform), l.Body(uid, it.Msg.Seq), l.Count(uid, it.Msg.Seq)},
			it.Msg.Timestamp, it.Msg.Seq, it.Msg.Body).Int()
		if err != nil {
			return added, err
		}
		added += n
	}
	return added, nil
}

func (s standinOffline) Read(ctx context.Context, uid, platform string, now time.Time, expiry time.Duration, limit int) ([]offline.Message, error) {
	l := rkeys.Cluster
	zs, err := s.rdb.ZRangeByScoreWithScores(ctx, l.Offline(uid, platform), &redis.ZRangeBy{
		Min: strconv.FormatInt(now.Add(-expiry).UnixMilli(), 10), Max: "+inf", Count: int64(limit)}).Result()
	if err != nil || len(zs) == 0 {
		return nil, err
	}
	keys := make([]string, len(zs))
	seqs := make([]int64, len(zs))
	for i, z := range zs {
		seqs[i], _ = strconv.ParseInt(z.Member.(string), 10, 64)
		keys[i] = l.Body(uid, seqs[i])
	}
	bodies, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	var out []offline.Message
	for i, b := range bodies {
		if b, ok := b.(string); ok {
			out = append(out, offline.Message{Seq: seqs[i], Timestamp: int64(zs[i].Score), Body: []byte(b)})
		}
	}
	return out, nil
}

func (s standinOffline) Delete(ctx context.Context, uid, platform string, seqs []int64) error {
	l := rkeys.Cluster
	keys := []string{l.Offline(uid, platform)}
	args := []any{}
	for _, seq := range seqs {
		keys = append(keys, l.Body(uid, seq), l.Count(uid, seq))
		args = append(args, seq)
	}
	return standinDelete.Run(ctx, s.rdb, keys, args...).Err()
}

type standinSessions struct{ rdb redis.UniversalClient }

func (s standinSessions) Add(ctx context.Context, uid string, sess session.Session, _ session.Caps, _ bool) ([]session.Session, error) {
	return nil, s.rdb.HSet(ctx, rkeys.Cluster.Sessions(uid), sess.Sid, session.Value(sess.Platform, sess.BoatID)).Err()
}

func (s standinSessions) List(ctx context.Context, uid string) ([]session.Session, error) {
	m, err := s.rdb.HGetAll(ctx, rkeys.Cluster.Sessions(uid)).Result()
	if err != nil {
		return nil, err
	}
	var out []session.Session
	for sid, v := range m {
		p, b, _ := session.ParseValue(v)
		out = append(out, session.Session{Sid: sid, Platform: p, BoatID: b})
	}
	return out, nil
}

func (s standinSessions) Remove(ctx context.Context, uid string, sessions ...session.Session) error {
	for _, sess := range sessions {
		if err := s.rdb.HDel(ctx, rkeys.Cluster.Sessions(uid), sess.Sid).Err(); err != nil {
			return err
		}
	}
	return nil
}

func newOffline(rdb redis.UniversalClient) offlineStore { return standinOffline{rdb} }

func newSessions(rdb redis.UniversalClient) sessionStore { return standinSessions{rdb} }
