package station

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// wantBroadcast fails unless p is a Broadcast task holding one message per
// body, stamped with seqs, without options, at a time in [from, to].
func wantBroadcast(t testing.TB, what string, p *mqpb.Payload, seqs []int64, bodies []*anypb.Any, from, to int64) *mqpb.Broadcast {
	t.Helper()
	b := p.GetBroadcast()
	if b == nil || p.GetSeq() == 0 || len(b.GetMsgs()) != len(seqs) {
		t.Fatalf("%s: task %v, want a stamped Broadcast of %d messages", what, p, len(seqs))
	}
	for j, m := range b.GetMsgs() {
		if m.GetSeq() != seqs[j] || m.GetOptions() != 0 || !proto.Equal(m.GetBody(), bodies[j]) ||
			m.GetTimestamp() < from || m.GetTimestamp() > to {
			t.Fatalf("%s: message %d is %v, want seq %d, no options, body %v, timestamp in [%d, %d]", what, j, m, seqs[j], bodies[j], from, to)
		}
	}
	return b
}

// countingPublisher counts the Publish calls made on the real producer.
type countingPublisher struct {
	Publisher
	calls, records atomic.Int64
}

func (c *countingPublisher) Publish(ctx context.Context, recs ...queue.Record) error {
	c.calls.Add(1)
	c.records.Add(int64(len(recs)))
	return c.Publisher.Publish(ctx, recs...)
}

// A BroadcastRoom publishes one task per room on the broadcast topic, in
// request order, keyed by the room, each with every body under the same
// seqs, all in one Publish call; nothing goes to the task topic.
func TestBroadcastRoomPublishesOneTaskPerRoom(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	pub := &countingPublisher{Publisher: r.s.queue}
	r.s.queue = pub
	ctx := context.Background()
	rooms := []string{"lobby", "match-7", strings.Repeat("r", room.MaxName)}
	bodies := []*anypb.Any{body(t, "one"), body(t, "two")}
	from := time.Now().UnixMilli()
	seqs, err := r.s.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: rooms, MsgBodies: bodies})
	to := time.Now().UnixMilli()
	if err != nil || len(seqs) != 2 || seqs[0] == 0 || seqs[0] >= seqs[1] {
		t.Fatalf("BroadcastRoom = %v, %v; want two increasing seqs", seqs, err)
	}
	if pub.calls.Load() != 1 || pub.records.Load() != 3 {
		t.Fatalf("%d Publish calls of %d records, want one of 3", pub.calls.Load(), pub.records.Load())
	}
	keys, recs := r.broadcasts()
	if !slices.Equal(keys, rooms) {
		t.Fatalf("keys %q, want one record per room keyed by it, %q", keys, rooms)
	}
	taskSeqs := map[int64]bool{}
	for i, p := range recs {
		b := wantBroadcast(t, rooms[i], p, seqs, bodies, from, to)
		if b.GetRoom() != rooms[i] || b.GetAll() || len(b.GetPlatforms()) != 0 {
			t.Fatalf("record %d: %v, want room %s only", i, b, rooms[i])
		}
		if taskSeqs[p.GetSeq()] || slices.Contains(seqs, p.GetSeq()) {
			t.Fatalf("record %d: task seq %d used twice", i, p.GetSeq())
		}
		taskSeqs[p.GetSeq()] = true
	}
	r.noTasks("a broadcast")
	if n := promtest.ToFloat64(r.s.metrics.Broadcasts.WithLabelValues("room")); n != 3 {
		t.Fatalf("%v room broadcasts counted, want 3 (one per room)", n)
	}
	if n := promtest.ToFloat64(r.s.metrics.MessagesAccepted); n != 2 {
		t.Fatalf("%v messages counted, want 2", n)
	}

	// The next broadcast's seqs follow.
	again, err := r.s.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"lobby"}, MsgBodies: bodies[:1]})
	if err != nil || len(again) != 1 || again[0] <= seqs[1] {
		t.Fatalf("second BroadcastRoom = %v, %v; want a seq after %d", again, err, seqs[1])
	}
	if keys, _ := r.broadcasts(); !slices.Equal(keys, []string{"lobby"}) {
		t.Fatalf("second broadcast keys %q", keys)
	}
}

// A BroadcastAll publishes one task keyed by room.AllKey with the platforms
// its platform_config selects, resolved (every configured one when empty).
func TestBroadcastAllPublishesResolvedPlatforms(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	bodies := []*anypb.Any{body(t, "all")}
	cases := []struct {
		pc   *pushpb.PlatformConfig
		want []string
	}{
		{nil, []string{"ios", "android", "web", "desktop"}},
		{&pushpb.PlatformConfig{}, []string{"ios", "android", "web", "desktop"}},
		{&pushpb.PlatformConfig{Platforms: []string{"web", "ios"}}, []string{"ios", "web"}},
		{&pushpb.PlatformConfig{WithoutPlatforms: []string{"web"}}, []string{"ios", "android", "desktop"}},
	}
	for _, c := range cases {
		from := time.Now().UnixMilli()
		seqs, err := r.s.BroadcastAll(context.Background(), &pushpb.BroadcastAllRequest{PlatformConfig: c.pc, MsgBodies: bodies})
		to := time.Now().UnixMilli()
		if err != nil || len(seqs) != 1 || seqs[0] == 0 {
			t.Fatalf("BroadcastAll(%v) = %v, %v", c.pc, seqs, err)
		}
		keys, recs := r.broadcasts()
		if !slices.Equal(keys, []string{room.AllKey}) {
			t.Fatalf("BroadcastAll(%v): keys %q, want one record keyed %q", c.pc, keys, room.AllKey)
		}
		b := wantBroadcast(t, "all", recs[0], seqs, bodies, from, to)
		if !b.GetAll() || b.GetRoom() != "" || !slices.Equal(b.GetPlatforms(), c.want) {
			t.Fatalf("BroadcastAll(%v): %v, want all to %v", c.pc, b, c.want)
		}
	}
	r.noTasks("broadcasts to all")
	if n := promtest.ToFloat64(r.s.metrics.Broadcasts.WithLabelValues("all")); n != 4 {
		t.Fatalf("%v broadcasts to all counted, want 4", n)
	}
}

// Every bad broadcast is refused with InvalidArgument and the exact message
// naming the field (or ResourceExhausted naming the flag), and nothing
// reaches the broadcast topic (nor the task topic).
func TestBroadcastRefusesBadInputPublishingNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) {
		c.MaxBroadcastRooms, c.MaxBodies, c.MaxBodyBytes, c.MaxRequestBytes, c.MaxPushBytes = 3, 2, 200, 300, 400
	})
	hi := sized(t, 10)
	long := strings.Repeat("r", room.MaxName+1)
	rooms := func(rs ...string) *pushpb.BroadcastRoomRequest {
		return &pushpb.BroadcastRoomRequest{Rooms: rs, MsgBodies: []*anypb.Any{hi}}
	}
	bodies := func(bs ...*anypb.Any) *pushpb.BroadcastRoomRequest {
		return &pushpb.BroadcastRoomRequest{Rooms: []string{"a"}, MsgBodies: bs}
	}
	bad := []struct {
		name string
		req  *pushpb.BroadcastRoomRequest
		code codes.Code
		msg  string
	}{
		{"no rooms", rooms(), codes.InvalidArgument, "rooms: must name at least one room"},
		{"too many rooms", rooms("a", "b", "c", "d"), codes.InvalidArgument, "rooms: 4 rooms, at most 3 per request (--max-broadcast-rooms)"},
		{"empty room", rooms("a", ""), codes.InvalidArgument, "rooms[1]: empty room name"},
		{"room with space", rooms("a b"), codes.InvalidArgument, `rooms[0]: room name "a b": byte 1 is not printable ASCII (spaces are not allowed)`},
		{"room with control", rooms("a", "b", "c\x00"), codes.InvalidArgument, `rooms[2]: room name "c\x00": byte 1 is not printable ASCII (spaces are not allowed)`},
		{"room not ASCII", rooms("café"), codes.InvalidArgument, `rooms[0]: room name "café": byte 3 is not printable ASCII (spaces are not allowed)`},
		{"room pattern", rooms("match-*"), codes.InvalidArgument, `rooms[0]: room name "match-*": '*' is not allowed in a room name`},
		{"long room", rooms(long), codes.InvalidArgument, "rooms[0]: room name of 129 bytes, at most 128"},
		{"duplicate room", rooms("a", "b", "a"), codes.InvalidArgument, `rooms[2]: "a" is rooms[0] again: name each room once`},
		{"no bodies", bodies(), codes.InvalidArgument, "msg_bodies: must hold at least one body"},
		{"too many bodies", bodies(hi, hi, hi), codes.InvalidArgument, "msg_bodies: 3 bodies, at most 2 per request"},
		{"nil body", bodies(nil), codes.InvalidArgument, "msg_bodies[0]: is empty (needs a type_url and a value)"},
		{"body without type", bodies(hi, &anypb.Any{Value: []byte("v")}), codes.InvalidArgument, "msg_bodies[1]: is empty (needs a type_url and a value)"},
		{"body without value", bodies(&anypb.Any{TypeUrl: "x"}), codes.InvalidArgument, "msg_bodies[0]: has an empty value"},
		{"body too big", bodies(hi, sized(t, 201)), codes.InvalidArgument, "msg_bodies[1]: is 201 bytes, at most 200"},
		{"request too big", bodies(sized(t, 150), sized(t, 151)), codes.InvalidArgument, "msg_bodies: 301 bytes in all, at most 300 per request"},
		{"broadcast too big", &pushpb.BroadcastRoomRequest{Rooms: []string{"a", "b", "c"}, MsgBodies: []*anypb.Any{wireSized(t, 150)}},
			codes.ResourceExhausted, "--max-push-bytes: 3 rooms × 150 bytes of bodies make 450 bytes, at most 400 per broadcast"},
	}
	for _, c := range bad {
		seqs, err := r.s.BroadcastRoom(context.Background(), c.req)
		if seqs != nil {
			t.Fatalf("%s: seqs %v returned with %v", c.name, seqs, err)
		}
		refusedAs(t, c.name, err, c.code, c.msg)
		r.noBroadcasts(c.name)
	}
	if n := promtest.ToFloat64(r.s.metrics.LimitRejections.WithLabelValues("max_push_bytes")); n != 1 {
		t.Fatalf("%v refusals counted for --max-push-bytes, want 1", n)
	}

	all := func(pc *pushpb.PlatformConfig, bs ...*anypb.Any) *pushpb.BroadcastAllRequest {
		return &pushpb.BroadcastAllRequest{PlatformConfig: pc, MsgBodies: bs}
	}
	badAll := []struct {
		name string
		req  *pushpb.BroadcastAllRequest
		msg  string
	}{
		{"unknown platform", all(&pushpb.PlatformConfig{Platforms: []string{"ios", "beos"}}, hi), `platform_config: unknown platform "beos"`},
		{"unknown platform left out", all(&pushpb.PlatformConfig{WithoutPlatforms: []string{"beos"}}, hi), `platform_config: unknown platform "beos"`},
		{"no platform left", all(&pushpb.PlatformConfig{Platforms: []string{"ios"}, WithoutPlatforms: []string{"ios"}}, hi),
			"platform_config: selects no platform (configured: ios, android, web, desktop)"},
		{"no bodies", all(nil), "msg_bodies: must hold at least one body"},
		{"too many bodies", all(nil, hi, hi, hi), "msg_bodies: 3 bodies, at most 2 per request"},
		{"nil body", all(nil, hi, nil), "msg_bodies[1]: is empty (needs a type_url and a value)"},
		{"body without value", all(nil, &anypb.Any{TypeUrl: "x"}), "msg_bodies[0]: has an empty value"},
		{"body too big", all(nil, sized(t, 201)), "msg_bodies[0]: is 201 bytes, at most 200"},
		{"request too big", all(nil, sized(t, 150), sized(t, 151)), "msg_bodies: 301 bytes in all, at most 300 per request"},
	}
	for _, c := range badAll {
		seqs, err := r.s.BroadcastAll(context.Background(), c.req)
		if seqs != nil {
			t.Fatalf("all, %s: seqs %v returned with %v", c.name, seqs, err)
		}
		refusedAs(t, "all, "+c.name, err, codes.InvalidArgument, c.msg)
		r.noBroadcasts("all, " + c.name)
	}
	r.noTasks("refused broadcasts")
	if n := promtest.ToFloat64(r.s.metrics.MessagesAccepted); n != 0 {
		t.Fatalf("%v messages counted for refused broadcasts", n)
	}

	// Every value at the edge of its limit passes.
	good := []*pushpb.BroadcastRoomRequest{
		rooms("a", "b", "c"),
		rooms(strings.Repeat("r", room.MaxName), "~!#$%&'()+,-./:;<=>?@[]^_`{|}"),
		bodies(hi, hi),
		bodies(sized(t, 200)),
		bodies(sized(t, 150), sized(t, 150)),
		{Rooms: []string{"a", "b"}, MsgBodies: []*anypb.Any{wireSized(t, 200)}}, // 400 bytes: --max-push-bytes
	}
	for _, req := range good {
		seqs, err := r.s.BroadcastRoom(context.Background(), req)
		if err != nil || len(seqs) != len(req.MsgBodies) {
			t.Fatalf("BroadcastRoom(%v) = %v, %v; want it accepted", req.Rooms, seqs, err)
		}
		if keys, _ := r.broadcasts(); !slices.Equal(keys, req.Rooms) {
			t.Fatalf("BroadcastRoom(%v) published %q", req.Rooms, keys)
		}
	}
}

// --broadcast-rate caps BroadcastRoom and BroadcastAll together: a second's
// worth passes at once, the next is refused with ResourceExhausted and the
// LIMIT_EXCEEDED detail naming the flag, counted, with nothing published;
// a token refilled lets a call pass again. A bad request is refused as bad,
// and takes no token.
func TestBroadcastRate(t *testing.T) {
	t.Parallel()
	// The limiter follows the setting: a second's worth at once.
	for _, c := range []struct {
		rate  float64
		burst int
	}{{0, 50}, {1, 1}, {2.5, 2}, {300, 300}} {
		s, err := New(Config{PushGRPCAddr: ":1", InternalAddr: ":2", BroadcastRate: c.rate}, zaptest.NewLogger(t), metrics.New(), nil, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := c.rate
		if want == 0 {
			want = 50
		}
		if s.broadcasts.Limit() != rate.Limit(want) || s.broadcasts.Burst() != c.burst {
			t.Fatalf("--broadcast-rate %g: limiter %v burst %d, want %g burst %d", c.rate, s.broadcasts.Limit(), s.broadcasts.Burst(), want, c.burst)
		}
	}

	r := newRig(t, func(c *Config) { c.BroadcastRate = 2 })
	ps := &pushServer{s: r.s}
	ctx := context.Background()
	// No token comes back during the test: two calls' worth, refilled hourly.
	r.s.broadcasts = rate.NewLimiter(rate.Every(time.Hour), 2)
	roomReq := &pushpb.BroadcastRoomRequest{Rooms: []string{"lobby"}, MsgBodies: []*anypb.Any{body(t, "hi")}}
	allReq := &pushpb.BroadcastAllRequest{MsgBodies: []*anypb.Any{body(t, "hi")}}
	if _, err := r.s.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"a b"}, MsgBodies: roomReq.MsgBodies}); status.Code(grpcerr.Status(err)) != codes.InvalidArgument {
		t.Fatalf("bad request: %v, want InvalidArgument", err)
	}
	if _, err := ps.BroadcastRoom(ctx, roomReq); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.BroadcastAll(ctx, allReq); err != nil {
		t.Fatal(err)
	}
	keys, _ := r.broadcasts()
	if !slices.Equal(keys, []string{"lobby", room.AllKey}) {
		t.Fatalf("published %q, want lobby and everyone", keys)
	}
	limited := func(what string, err error) {
		t.Helper()
		st := status.Convert(err)
		var detail *errorpb.Error
		for _, d := range st.Details() {
			detail, _ = d.(*errorpb.Error)
		}
		if st.Code() != codes.ResourceExhausted || detail.GetCode() != errorpb.Code_LIMIT_EXCEEDED || detail.GetField() != "--broadcast-rate" ||
			!strings.HasPrefix(st.Message(), "--broadcast-rate: more than 2 broadcasts per second on this station; retry in ") {
			t.Fatalf("%s: %v (detail %v), want ResourceExhausted with LIMIT_EXCEEDED naming --broadcast-rate", what, err, detail)
		}
	}
	_, err := ps.BroadcastRoom(ctx, roomReq)
	limited("third broadcast", err)
	_, err = ps.BroadcastAll(ctx, allReq)
	limited("fourth broadcast", err)
	// A bad request while limited is still refused for what is wrong.
	_, err = ps.BroadcastAll(ctx, &pushpb.BroadcastAllRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad request while limited: %v, want InvalidArgument", err)
	}
	r.noBroadcasts("limited broadcasts")
	if n := promtest.ToFloat64(r.s.metrics.LimitRejections.WithLabelValues("broadcast_rate")); n != 2 {
		t.Fatalf("%v refusals counted for --broadcast-rate, want 2", n)
	}
	if n := promtest.ToFloat64(r.s.metrics.PushRequests.WithLabelValues("ResourceExhausted")); n != 2 {
		t.Fatalf("%v requests counted ResourceExhausted, want 2", n)
	}

	// With the configured limiter (2 per second): once refused, a call
	// passes again within the second.
	r.s.broadcasts = rate.NewLimiter(rate.Limit(r.s.cfg.BroadcastRate), 2)
	for range 2 {
		if _, err := ps.BroadcastRoom(ctx, roomReq); err != nil {
			t.Fatal(err)
		}
	}
	passed := time.Now()
	testutil.WaitFor(t, 5*time.Second, func() error {
		_, err := ps.BroadcastRoom(ctx, roomReq)
		return err
	})
	if waited := time.Since(passed); waited > 2*time.Second {
		t.Fatalf("a token took %s to come back, want at most 500ms", waited)
	}
	if keys, _ := r.broadcasts(); len(keys) != 3 {
		t.Fatalf("%d broadcasts published, want 3", len(keys))
	}
}

// With Kafka down, a broadcast is refused Unavailable with the
// QUEUE_UNAVAILABLE detail and no seqs, and counted as neither a broadcast
// nor accepted messages.
func TestBroadcastKafkaDown(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	up := r.s.queue
	down := queue.NewProducer(queue.ProducerConfig{Brokers: []string{"127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))}, WriteTimeout: 3 * time.Second},
		zaptest.NewLogger(t))
	t.Cleanup(func() { _ = down.Close() })
	r.s.queue = down
	ps := &pushServer{s: r.s}
	ctx := context.Background()
	bodies := []*anypb.Any{body(t, "hi")}
	unavailable := func(what string, resp *pushpb.BroadcastResponse, err error) {
		t.Helper()
		if resp != nil || status.Code(err) != codes.Unavailable || grpcerr.DetailCode(err) != errorpb.Code_QUEUE_UNAVAILABLE {
			t.Fatalf("%s with Kafka down: %v, %v; want Unavailable with QUEUE_UNAVAILABLE", what, resp, err)
		}
	}
	resp, err := ps.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"a", "b"}, MsgBodies: bodies})
	unavailable("BroadcastRoom", resp, err)
	resp, err = ps.BroadcastAll(ctx, &pushpb.BroadcastAllRequest{MsgBodies: bodies})
	unavailable("BroadcastAll", resp, err)
	for _, kind := range []string{"room", "all"} {
		if n := promtest.ToFloat64(r.s.metrics.Broadcasts.WithLabelValues(kind)); n != 0 {
			t.Fatalf("%v %s broadcasts counted with Kafka down", n, kind)
		}
	}
	if n := promtest.ToFloat64(r.s.metrics.MessagesAccepted); n != 0 {
		t.Fatalf("%v messages counted with Kafka down", n)
	}
	if n := promtest.ToFloat64(r.s.metrics.BackendErrors.WithLabelValues("kafka", "publish")); n != 2 {
		t.Fatalf("%v Kafka errors counted, want 2", n)
	}
	r.noBroadcasts("Kafka down")

	r.s.queue = up
	if resp, err := ps.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"a", "b"}, MsgBodies: bodies}); err != nil || len(resp.GetSeqs()) != 1 {
		t.Fatalf("BroadcastRoom with Kafka back: %v, %v", resp, err)
	}
	if keys, _ := r.broadcasts(); !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("published %q with Kafka back", keys)
	}
}

// BenchmarkBroadcastRoom measures one BroadcastRoom to 1 and to 100 rooms
// (one body) until Kafka (the in-process broker) acknowledged it.
func BenchmarkBroadcastRoom(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(strconv.Itoa(n)+"rooms", func(b *testing.B) {
			r := newRig(b, func(c *Config) { c.BroadcastRate = 1e9 })
			req := &pushpb.BroadcastRoomRequest{MsgBodies: []*anypb.Any{body(b, "hi")}}
			for i := range n {
				req.Rooms = append(req.Rooms, "room-"+strconv.Itoa(i))
			}
			ctx := context.Background()
			for b.Loop() {
				if _, err := r.s.BroadcastRoom(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
