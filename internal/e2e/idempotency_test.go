package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

func keyedPush(key string, uids []string, bodies ...string) *pushpb.PushRequest {
	req := &pushpb.PushRequest{Uids: uids, IdempotencyKey: key}
	for _, b := range bodies {
		req.MsgBodies = append(req.MsgBodies, text(b))
	}
	return req
}

func withIdempotencyWindow(d time.Duration) option {
	return func(c *app.ClusterConfig) { c.Station.Station.IdempotencyWindow = d }
}

// wantRefused checks err is code and names idempotency_key.
func wantRefused(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), "idempotency_key") {
		t.Fatalf("%s: %v, want %s naming idempotency_key", what, err, code)
	}
}

// A retry with the same key returns the first seqs and writes nothing; the
// same key with a different request is refused and writes nothing; another
// key publishes.
func TestIdempotentPushRetryReturnsSameSeqs(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withServices("station"), redisOpt)
		ctx := context.Background()
		req := keyedPush("order-17", []string{"alice", "bob"}, "one", "two")
		first, err := e.push.Push(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if n := e.topicRecords(); n != 2 {
			t.Fatalf("%d records after the first push, want 2 (one per uid)", n)
		}
		for i := 0; i < 3; i++ {
			again, err := e.push.Push(ctx, keyedPush("order-17", []string{"alice", "bob"}, "one", "two"))
			if err != nil {
				t.Fatalf("retry %d: %v", i, err)
			}
			if !slices.Equal(again.GetSeqs(), first.GetSeqs()) {
				t.Fatalf("retry %d: seqs %v, want the first call's %v", i, again.GetSeqs(), first.GetSeqs())
			}
		}
		if n := e.topicRecords(); n != 2 {
			t.Fatalf("%d records after retries, want still 2", n)
		}
		_, err = e.push.Push(ctx, keyedPush("order-17", []string{"alice", "bob"}, "one", "changed"))
		wantRefused(t, "same key, other body", err, codes.InvalidArgument)
		_, err = e.push.Push(ctx, keyedPush("order-17", []string{"alice"}, "one", "two"))
		wantRefused(t, "same key, other uids", err, codes.InvalidArgument)
		if n := e.topicRecords(); n != 2 {
			t.Fatalf("%d records after refused pushes, want still 2", n)
		}
		other, err := e.push.Push(ctx, keyedPush("order-18", []string{"alice", "bob"}, "one", "two"))
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(other.GetSeqs(), first.GetSeqs()) {
			t.Fatalf("another key got the same seqs %v", other.GetSeqs())
		}
		if n := e.topicRecords(); n != 4 {
			t.Fatalf("%d records after a push with another key, want 4", n)
		}
		ttl, err := e.rdb.PTTL(ctx, e.keys.Idempotency("order-17")).Result()
		if err != nil || ttl <= time.Hour || ttl > 24*time.Hour {
			t.Fatalf("TTL of %s: %v %v, want within the default 24h window", e.keys.Idempotency("order-17"), ttl, err)
		}
	})
}

// Ten concurrent calls with one key publish once; every call that succeeds
// returns the same seqs, the others are told to retry (Aborted).
func TestIdempotentPushConcurrentRetriesPublishOnce(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withServices("station"), redisOpt)
		var (
			mu   sync.Mutex
			seqs [][]int64
			wg   sync.WaitGroup
		)
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := e.push.Push(context.Background(), keyedPush("burst", []string{"carol"}, "hello"))
				if err != nil {
					if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "idempotency_key") {
						t.Errorf("concurrent push: %v, want success or Aborted naming idempotency_key", err)
					}
					return
				}
				mu.Lock()
				seqs = append(seqs, resp.GetSeqs())
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(seqs) == 0 {
			t.Fatal("no concurrent push succeeded")
		}
		for _, s := range seqs[1:] {
			if !slices.Equal(s, seqs[0]) {
				t.Fatalf("concurrent pushes returned different seqs: %v", seqs)
			}
		}
		if n := e.topicRecords(); n != 1 {
			t.Fatalf("%d records after 10 concurrent pushes with one key, want 1", n)
		}
		// Once settled, a retry gets the same seqs.
		resp, err := e.push.Push(context.Background(), keyedPush("burst", []string{"carol"}, "hello"))
		if err != nil || !slices.Equal(resp.GetSeqs(), seqs[0]) {
			t.Fatalf("retry after the burst: %v %v, want %v", resp.GetSeqs(), err, seqs[0])
		}
	})
}

// fingerprintOf mirrors station's fingerprint: SHA-256 of the request
// without its key, marshalled deterministically.
func fingerprintOf(t *testing.T, req *pushpb.PushRequest) string {
	c := proto.Clone(req).(*pushpb.PushRequest)
	c.IdempotencyKey = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// A retry while the first call is in flight is told to retry and publishes
// nothing; it publishes once the reservation is gone.
func TestIdempotentPushInFlightRefused(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withServices("station"))
		ctx := context.Background()
		req := keyedPush("pending", []string{"dave"}, "x")
		// The reservation a first call holds while Kafka has not answered yet.
		if err := e.rdb.Set(ctx, e.keys.Idempotency("pending"), "p:"+fingerprintOf(t, req)+":other", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := e.push.Push(ctx, req)
		wantRefused(t, "push while the key is in flight", err, codes.Aborted)
		if n := e.topicRecords(); n != 0 {
			t.Fatalf("%d records written while the key was in flight, want 0", n)
		}
		if err := e.rdb.Del(ctx, e.keys.Idempotency("pending")).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.push.Push(ctx, req); err != nil {
			t.Fatal(err)
		}
		if n := e.topicRecords(); n != 1 {
			t.Fatalf("%d records, want 1", n)
		}
	})
}

// After --idempotency-window the key is forgotten and the same request
// publishes again, with new seqs.
func TestIdempotentPushWindowExpires(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withServices("station"), withIdempotencyWindow(time.Second), redisOpt)
		ctx := context.Background()
		first, err := e.push.Push(ctx, keyedPush("short", []string{"erin"}, "x"))
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := e.rdb.PTTL(ctx, e.keys.Idempotency("short")).Result()
		if err != nil || ttl <= 0 || ttl > time.Second {
			t.Fatalf("TTL %v %v, want within the 1s window", ttl, err)
		}
		testutil.WaitFor(t, 10*time.Second, func() error {
			if n, err := e.rdb.Exists(ctx, e.keys.Idempotency("short")).Result(); err != nil || n != 0 {
				return fmt.Errorf("key still there (%d, %v)", n, err)
			}
			return nil
		})
		again, err := e.push.Push(ctx, keyedPush("short", []string{"erin"}, "x"))
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(again.GetSeqs(), first.GetSeqs()) {
			t.Fatalf("after the window: seqs %v, want new ones", again.GetSeqs())
		}
		if n := e.topicRecords(); n != 2 {
			t.Fatalf("%d records, want 2 (the window passed)", n)
		}
	})
}

// Bad keys are refused naming the field; with Redis down a keyed push is
// Unavailable and publishes nothing.
func TestIdempotentPushBadKeyAndRedisDown(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withServices("station"))
		ctx := context.Background()
		for _, k := range []string{strings.Repeat("k", 129), "has space", "ctl\x01"} {
			_, err := e.push.Push(ctx, keyedPush(k, []string{"frank"}, "x"))
			wantRefused(t, fmt.Sprintf("key %q", k), err, codes.InvalidArgument)
		}
		if _, err := e.push.Push(ctx, keyedPush(strings.Repeat("k", 128), []string{"frank"}, "x")); err != nil {
			t.Fatalf("128-byte key: %v", err)
		}
		e.redis.Stop()
		_, err := e.push.Push(ctx, keyedPush("down", []string{"frank"}, "x"))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("keyed push with Redis down: %v, want Unavailable", err)
		}
		if n := e.topicRecords(); n != 1 {
			t.Fatalf("%d records, want 1 (nothing written with Redis down)", n)
		}
	})
}

// A push whose publish fails releases its key: nothing stays reserved, so
// a retry can publish.
func TestIdempotentPushFailedPublishReleasesKey(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withServices("station"), func(c *app.ClusterConfig) { c.Backends.KafkaWriteTimeout = 2 * time.Second })
		e.stopQueue()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, err := e.push.Push(ctx, &pushpb.PushRequest{Uids: []string{"gina"}, MsgBodies: []*anypb.Any{text("x")}, IdempotencyKey: "fails"})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("push with the queue down: %v, want Unavailable", err)
		}
		if n, err := e.rdb.Exists(context.Background(), e.keys.Idempotency("fails")).Result(); err != nil || n != 0 {
			t.Fatalf("key still reserved after a failed publish (%d, %v)", n, err)
		}
	})
}

// Over HTTP/JSON: idempotencyKey returns the first seqs on a retry; another
// body under the key is 400, a key in flight is 409 ABORTED.
func TestIdempotentPushHTTP(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withServices("station"))
		url := "http://" + e.gomsg.Station.PushHTTPAddr() + "/v1/push"
		body := func(s string) string {
			return `{"uids":["hank"],"idempotencyKey":"http-1","msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"` + s + `"}]}`
		}
		resp, first := httpDo(t, "POST", url, "application/json", body("a"))
		if resp.StatusCode != 200 || !strings.Contains(string(first), `"seqs"`) {
			t.Fatalf("first: %d %s", resp.StatusCode, first)
		}
		resp, again := httpDo(t, "POST", url, "application/json", body("a"))
		if resp.StatusCode != 200 || string(again) != string(first) {
			t.Fatalf("retry: %d %s, want 200 %s", resp.StatusCode, again, first)
		}
		resp, b := httpDo(t, "POST", url, "application/json", body("b"))
		wantHTTPError(t, "same key, other body", resp, b, 400, 3, "INVALID_ARGUMENT", "idempotency_key")
		req := keyedPush("http-2", []string{"hank"}, "c")
		if err := e.rdb.Set(context.Background(), e.keys.Idempotency("http-2"), "p:"+fingerprintOf(t, req)+":other", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		resp, b = httpDo(t, "POST", url, "application/json",
			`{"uids":["hank"],"idempotencyKey":"http-2","msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"c"}]}`)
		wantHTTPError(t, "key in flight", resp, b, 409, 10, "ABORTED", "idempotency_key", "retry")
		if n := e.topicRecords(); n != 1 {
			t.Fatalf("%d records, want 1", n)
		}
	})
}
