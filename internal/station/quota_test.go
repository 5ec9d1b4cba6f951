package station

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/idempotency"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// The Push and BroadcastRoom calls of one station hold at most
// --max-push-bytes-in-flight bytes of fan-out at once: a call that does not
// fit beside those in flight is refused ResourceExhausted naming the flag,
// counted, and publishes nothing; once the others are done it passes, and a
// finished call gives its bytes back.
func TestPushBytesInFlight(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) {
		c.MaxBodyBytes, c.MaxRequestBytes, c.MaxPushBytes, c.MaxPushBytesInFlight = 1000, 1000, 1000, 1000
	})
	b := body(t, strings.Repeat("x", 100))
	req := &pushpb.PushRequest{Uids: []string{"a", "b", "c"}, MsgBodies: []*anypb.Any{b}}
	n := int64(pushBytes(req, 3))
	room := &pushpb.BroadcastRoomRequest{Rooms: []string{"r1", "r2", "r3"}, MsgBodies: []*anypb.Any{b}}

	// Another call holds all but n-1 bytes.
	release, err := r.s.acquirePushBytes(1000 - n + 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.s.Push(context.Background(), req)
	exhausted(t, "push beside another", err, "--max-push-bytes-in-flight")
	r.noTasks("refused push")
	_, err = r.s.BroadcastRoom(context.Background(), room)
	exhausted(t, "broadcast beside another", err, "--max-push-bytes-in-flight")
	r.noBroadcasts("refused broadcast")
	if got := promtest.ToFloat64(r.s.metrics.LimitRejections.WithLabelValues("max_push_bytes_in_flight")); got != 2 {
		t.Fatalf("%v refusals counted, want 2", got)
	}
	release()

	// Alone, calls pass one after the other: each gives its bytes back.
	for i := range 1000/int(n) + 2 {
		if _, err := r.s.Push(context.Background(), req); err != nil {
			t.Fatalf("push %d after the other call ended: %v", i, err)
		}
		if _, err := r.s.BroadcastRoom(context.Background(), room); err != nil {
			t.Fatalf("broadcast %d after the other call ended: %v", i, err)
		}
	}
	if !r.s.inFlight.sem.TryAcquire(1000) {
		t.Fatal("bytes still held after every call returned")
	}
}

// exhausted checks err is ResourceExhausted naming flag.
func exhausted(t testing.TB, name string, err error, flag string) {
	t.Helper()
	var ge *grpcerr.Error
	if !errors.As(err, &ge) || ge.Code != codes.ResourceExhausted || !strings.Contains(ge.Error(), flag) {
		t.Fatalf("%s: %v; want ResourceExhausted naming %s", name, err, flag)
	}
}

// Each API key has its own budget of Push calls, receipts-tracked targets
// and idempotency keys per second on a station: one key past a budget is
// refused ResourceExhausted naming the flag and the key (HTTP 429), counted
// per key, with nothing published, while another key still passes.
func TestPerKeyQuotas(t *testing.T) {
	t.Parallel()
	const slow = 0.001 // one at once, the next in 1000 s
	r, srv := httpRig(t, func(c *Config) {
		c.PushRatePerKey = slow
	})
	r.s.cfg.Receipts = receipt.New(testReceiptsTopic, r.s.queue)
	r.s.cfg.Idempotency = idempotency.New(r.rdb)
	push := func(key, body string) answer {
		t.Helper()
		return call(t, srv, "POST", "/v1/push", "application/json", key, strings.NewReader(body))
	}
	refused := func(a answer, what, flag, key string) {
		t.Helper()
		if a.status != 429 || a.err.Status != "RESOURCE_EXHAUSTED" || !strings.Contains(a.err.Message, flag) ||
			!strings.Contains(a.err.Message, fmt.Sprintf("%q", key)) {
			t.Fatalf("%s: %d %+v; want 429 RESOURCE_EXHAUSTED naming %s and key %q", what, a.status, a.err, flag, key)
		}
	}
	counted := func(label, key string, want float64) {
		t.Helper()
		if got := promtest.ToFloat64(r.s.metrics.KeyQuotaRejections.WithLabelValues(label, key)); got != want {
			t.Fatalf("%s refusals of key %s: %v, want %v", label, key, got, want)
		}
	}

	if a := push(pushKey, okPush); a.status != 200 {
		t.Fatalf("first push: %d %s", a.status, a.body)
	}
	r.tasks()
	refused(push(pushKey, okPush), "second push of one key", "--push-rate-per-key", "push")
	r.noTasks("push over the key's rate")
	counted("push_rate_per_key", "push", 1)
	if a := push(allKey, okPush); a.status != 200 {
		t.Fatalf("another key's push: %d %s", a.status, a.body)
	}
	r.tasks()
	counted("push_rate_per_key", "all", 0)

	// Receipts: 3 uids × 1 platform × 1 message tracked, against a budget
	// of 4 targets at once.
	r.s.pushQuota = newKeyQuota("--push-rate-per-key", "push_rate_per_key", "pushes", 1000, 1)
	r.s.receiptsQuota = newKeyQuota("--receipts-rate-per-key", "receipts_rate_per_key", "receipts-tracked targets", slow, 4)
	tracked := `{"uids":["a","b","c"],"msgOptions":8,"platformConfig":{"platforms":["ios"]},"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"hi"}]}`
	if a := push(allKey, tracked); a.status != 200 {
		t.Fatalf("first tracked push: %d %s", a.status, a.body)
	}
	r.tasks()
	refused(push(allKey, tracked), "tracked push past the budget", "--receipts-rate-per-key", "all")
	r.noTasks("tracked push over the key's budget")
	counted("receipts_rate_per_key", "all", 1)
	if a := push(pushKey, tracked); a.status != 200 {
		t.Fatalf("another key's tracked push: %d %s", a.status, a.body)
	}
	r.tasks()
	// Untracked pushes do not count against it.
	if a := push(allKey, okPush); a.status != 200 {
		t.Fatalf("untracked push: %d %s", a.status, a.body)
	}
	r.tasks()

	// Idempotency keys: one at once; nothing reserved for a refused one.
	r.s.idempotencyQuota = newKeyQuota("--idempotency-rate-per-key", "idempotency_rate_per_key", "idempotency keys", slow, 1)
	keyed := func(k string) string {
		return `{"uids":["ann"],"idempotencyKey":"` + k + `","msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"hi"}]}`
	}
	if a := push(allKey, keyed("k1")); a.status != 200 {
		t.Fatalf("first keyed push: %d %s", a.status, a.body)
	}
	r.tasks()
	refused(push(allKey, keyed("k2")), "second idempotency key", "--idempotency-rate-per-key", "all")
	r.noTasks("keyed push over the key's budget")
	counted("idempotency_rate_per_key", "all", 1)
	if n := r.rdb.Exists(context.Background(), rkeys.Standalone.Idempotency("k2")).Val(); n != 0 {
		t.Fatal("a refused push reserved its idempotency key")
	}
	if a := push(pushKey, keyed("k3")); a.status != 200 {
		t.Fatalf("another key's keyed push: %d %s", a.status, a.body)
	}
	r.tasks()
}
