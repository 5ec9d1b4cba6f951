package station

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// pullRig is a rig whose station has an offline store on the rig's Redis,
// with ios keeping up to 1,000 messages for a week.
type pullRig struct {
	*rig
	store *offline.Store
	pol   offline.Policy
}

func newPullRig(t *testing.T, change func(*Config)) *pullRig {
	t.Helper()
	r := newRig(t, func(c *Config) {
		c.Platforms = platform.MustParse("ios:offline=168h/1000,web:offline=none")
		if change != nil {
			change(c)
		}
	})
	store := offline.New(r.rdb)
	r.s.cfg.Offline = store
	pol, _ := r.s.cfg.Platforms.Get("ios")
	return &pullRig{rig: r, store: store, pol: pol.Offline}
}

// storeMsgs stores n messages for uid on ios, sent at, with seqs first,
// first+1, …, and bodies of size bytes (at least "m<seq>"). Seqs are
// unique across users (on a standalone Redis users share a seq's body).
func (r *pullRig) storeMsgs(uid string, first int64, n int, at time.Time, size int) []int64 {
	r.t.Helper()
	items := make([]offline.Item, n)
	seqs := make([]int64, n)
	for i := range n {
		seq := first + int64(i)
		s := fmt.Sprint("m", seq)
		s += strings.Repeat(".", max(0, size-len(s)))
		body, _ := anypb.New(wrapperspb.String(s))
		b, err := proto.Marshal(&msgpb.Message{Seq: seq, Options: uint32(msgpb.Option_NEED_OFFLINE), Body: body, Timestamp: at.UnixMilli()})
		if err != nil {
			r.t.Fatal(err)
		}
		items[i] = offline.Item{Platform: "ios", Policy: r.pol, Msg: offline.Message{Seq: seq, Timestamp: at.UnixMilli(), Body: b}}
		seqs[i] = seq
	}
	if _, err := r.store.Write(context.Background(), uid, items); err != nil {
		r.t.Fatal(err)
	}
	return seqs
}

func (r *pullRig) stored(uid string) int64 {
	r.t.Helper()
	n, err := r.rdb.ZCard(context.Background(), rkeys.Of(r.rdb).Offline(uid, "ios")).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

func (r *pullRig) pull(boatID, uid, sid string, ack []int64, limit int) ([]*msgpb.Message, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.s.PullOffline(ctx, boatID, uid, sid, ack, limit)
}

// 250 stored messages page out 100, 100, 50, oldest first, each page ACKing
// the one before; more is false on the last; the last ACK empties the store.
// The ACK hook hears each ACK while its seqs are still stored.
func TestPullOfflinePages(t *testing.T) {
	t.Parallel()
	var hooked [][]int64
	var r *pullRig
	r = newPullRig(t, func(c *Config) {
		c.OnPullAck = func(ctx context.Context, uid, platform, sid, _ string, seqs []int64) error {
			if uid != "ann" || platform != "ios" || sid != "1" {
				t.Errorf("hook got %s/%s sid %s, want ann/ios sid 1", uid, platform, sid)
			}
			left, err := r.store.Read(ctx, uid, platform, time.Now(), r.pol.Expiry, 1000)
			if err != nil {
				return err
			}
			for _, seq := range seqs {
				if !slices.ContainsFunc(left, func(m offline.Message) bool { return m.Seq == seq }) {
					t.Errorf("hook ran with seq %d no longer stored", seq)
				}
			}
			hooked = append(hooked, slices.Clone(seqs))
			return nil
		}
	})
	if err := r.connect("ann", "ios", "1"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	stored := r.storeMsgs("ann", 1000, 250, now, 0)
	r.storeMsgs("ann", 1, 3, now.Add(-200*time.Hour), 0) // past ios's week: never pulled

	var pulled, ack, sizes []int64
	for {
		msgs, more, err := r.pull(testBoat, "ann", "1", ack, 100)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, int64(len(msgs)))
		ack = ack[:0]
		for _, m := range msgs {
			pulled = append(pulled, m.GetSeq())
			ack = append(ack, m.GetSeq())
		}
		if !more {
			break
		}
		if len(sizes) == 5 {
			t.Fatalf("more still set after pages of %v", sizes)
		}
	}
	if !slices.Equal(sizes, []int64{100, 100, 50}) || !slices.Equal(pulled, stored) {
		t.Fatalf("pages of %v, pulled %v; want 100, 100, 50 and %v", sizes, pulled, stored)
	}
	msgs, more, err := r.pull(testBoat, "ann", "1", ack, 0)
	if err != nil || len(msgs) != 0 || more {
		t.Fatalf("pull after the last page: %d messages, more %v, %v; want none", len(msgs), more, err)
	}
	if n := r.stored("ann"); n != 0 {
		t.Fatalf("%d left in the store (expired ones included), want 0", n)
	}
	if len(hooked) != 3 || !slices.Equal(slices.Concat(hooked...), stored) {
		t.Fatalf("hook heard %d ACKs of %d seqs, want 3 of all 250", len(hooked), len(slices.Concat(hooked...)))
	}
}

// limit: 0 or above PullPage is a page of PullPage, a smaller one is taken;
// a page's bodies stop near maxPullBytes (more set), at least one message.
func TestPullOfflinePageBounds(t *testing.T) {
	t.Parallel()
	r := newPullRig(t, nil)
	if err := r.connect("bea", "ios", "1"); err != nil {
		t.Fatal(err)
	}
	r.storeMsgs("bea", 1, 150, time.Now(), 0)
	for _, c := range []struct{ limit, want int }{{0, PullPage}, {-3, PullPage}, {500, PullPage}, {7, 7}, {1, 1}} {
		msgs, more, err := r.pull(testBoat, "bea", "1", nil, c.limit)
		if err != nil || len(msgs) != c.want || !more {
			t.Errorf("limit %d: %d messages, more %v, %v; want %d and more", c.limit, len(msgs), more, err, c.want)
		}
	}

	r.storeMsgs("cid", 1001, 30, time.Now(), 100<<10)
	if err := r.connect("cid", "ios", "2"); err != nil {
		t.Fatal(err)
	}
	msgs, more, err := r.pull(testBoat, "cid", "2", nil, 100)
	if err != nil || len(msgs) != maxPullBytes/(100<<10) || !more {
		t.Fatalf("100 KiB bodies: %d messages, more %v, %v; want %d and more", len(msgs), more, err, maxPullBytes/(100<<10))
	}
	r.storeMsgs("dee", 2001, 2, time.Now(), 2*maxPullBytes)
	if err := r.connect("dee", "ios", "3"); err != nil {
		t.Fatal(err)
	}
	if msgs, more, err := r.pull(testBoat, "dee", "3", nil, 100); err != nil || len(msgs) != 1 || !more {
		t.Fatalf("bodies over the page bound: %d messages, more %v, %v; want 1 and more", len(msgs), more, err)
	}
}

// A Pull for a session the uid does not hold on the calling boat — another
// boat's, another uid's, an unknown sid — is refused PermissionDenied
// (SESSION_NOT_FOUND) and deletes nothing.
func TestPullOfflineNotYourSession(t *testing.T) {
	t.Parallel()
	r := newPullRig(t, nil)
	if err := r.connect("eve", "ios", "1"); err != nil {
		t.Fatal(err)
	}
	if err := r.connect("fay", "ios", "2"); err != nil {
		t.Fatal(err)
	}
	seqs := r.storeMsgs("eve", 1, 5, time.Now(), 0)
	for _, c := range []struct{ boat, uid, sid string }{
		{"boat-2", "eve", "1"}, // another boat
		{testBoat, "fay", "1"}, // another uid
		{testBoat, "eve", "2"}, // fay's sid
		{testBoat, "eve", "9"}, // no such session
	} {
		_, _, err := r.pull(c.boat, c.uid, c.sid, seqs, 10)
		st := status.Convert(grpcerr.Status(err))
		if st.Code() != codes.PermissionDenied || grpcerr.DetailCode(st.Err()) != errorpb.Code_SESSION_NOT_FOUND {
			t.Errorf("pull as %+v: %v, want PermissionDenied SESSION_NOT_FOUND", c, err)
		}
	}
	if n := r.stored("eve"); n != 5 {
		t.Fatalf("%d stored after refused pulls, want 5", n)
	}
}

// Bad input is InvalidArgument naming the field, and deletes nothing.
func TestPullOfflineValidation(t *testing.T) {
	t.Parallel()
	r := newPullRig(t, nil)
	if err := r.connect("gus", "ios", "1"); err != nil {
		t.Fatal(err)
	}
	seqs := r.storeMsgs("gus", 1, 5, time.Now(), 0)
	tooMany := make([]int64, MaxPullAck+1)
	for i := range tooMany {
		tooMany[i] = int64(i + 1)
	}
	for _, c := range []struct {
		boat, uid, sid string
		ack            []int64
		field          string
	}{
		{"", "gus", "1", seqs, "boat_id"},
		{testBoat, "gus", "", seqs, "sid"},
		{testBoat, "", "1", seqs, "uid"},
		{testBoat, "g/s", "1", seqs, "uid"},
		{testBoat, "gus", "1", tooMany, "ack"},
		{testBoat, "gus", "1", []int64{1, 2, 0}, "ack"},
		{testBoat, "gus", "1", []int64{-4, 1}, "ack"},
	} {
		_, _, err := r.pull(c.boat, c.uid, c.sid, c.ack, 10)
		invalid(t, err, c.field)
	}
	if n := r.stored("gus"); n != 5 {
		t.Fatalf("%d stored after refused pulls, want 5", n)
	}
	// MaxPullAck seqs are fine.
	if _, _, err := r.pull(testBoat, "gus", "1", tooMany[:MaxPullAck], 10); err != nil {
		t.Fatalf("pull ACKing %d seqs: %v", MaxPullAck, err)
	}
	if n := r.stored("gus"); n != 0 {
		t.Fatalf("%d stored after ACKing seqs 1…%d, want 0", n, MaxPullAck)
	}
}

// A platform that stores nothing pulls empty pages; a pull-mode connect's
// task says pull, a plain one's does not.
func TestPullOfflineNoStoreAndConnectTask(t *testing.T) {
	t.Parallel()
	r := newPullRig(t, nil)
	ctx := context.Background()
	if _, err := r.s.ConnectPull(ctx, r.token("hal", "web"), testBoat, "1"); err != nil {
		t.Fatal(err)
	}
	if err := r.connect("hal", "ios", "2"); err != nil {
		t.Fatal(err)
	}
	_, tasks := r.tasks()
	var pulls []bool
	for _, p := range tasks {
		if o := p.GetSendOfflineToSession(); o != nil {
			pulls = append(pulls, o.GetPull())
		}
	}
	if !slices.Equal(pulls, []bool{true, false}) {
		t.Fatalf("SendOfflineToSession pull flags %v, want [true false] (pull-mode connect, then a plain one)", pulls)
	}
	msgs, more, err := r.pull(testBoat, "hal", "1", []int64{5}, 10)
	if err != nil || len(msgs) != 0 || more {
		t.Fatalf("pull on web (offline=none): %d, %v, %v; want an empty page", len(msgs), more, err)
	}
}

// The gRPC adapter: ConnectRequest.pull_offline reaches the task, and a
// PullOffline is counted by result.
func TestPullOfflineServer(t *testing.T) {
	t.Parallel()
	r := newPullRig(t, nil)
	is := &internalServer{s: r.s}
	ctx := context.Background()
	if _, err := is.Connect(ctx, &stationpb.ConnectRequest{Token: r.token("ivy", "ios"), BoatId: testBoat, Sid: "1", PullOffline: true}); err != nil {
		t.Fatal(err)
	}
	_, tasks := r.tasks()
	if o := tasks[len(tasks)-1].GetSendOfflineToSession(); !o.GetPull() || o.GetSid() != "1" {
		t.Fatalf("last task %v, want SendOfflineToSession of sid 1 with pull", tasks[len(tasks)-1])
	}
	r.storeMsgs("ivy", 1, 3, time.Now(), 0)
	resp, err := is.PullOffline(ctx, &stationpb.PullOfflineRequest{BoatId: testBoat, Uid: "ivy", Sid: "1", Limit: 2})
	if err != nil || len(resp.GetMsgs()) != 2 || !resp.GetMore() {
		t.Fatalf("PullOffline: %v, %v; want 2 messages and more", resp, err)
	}
	if _, err := is.PullOffline(ctx, &stationpb.PullOfflineRequest{BoatId: "other", Uid: "ivy", Sid: "1"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("PullOffline from another boat: %v, want PermissionDenied", err)
	}
	if _, err := is.PullOffline(ctx, &stationpb.PullOfflineRequest{Uid: "ivy", Sid: "1"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("PullOffline without boat_id: %v, want InvalidArgument", err)
	}
	for result, want := range map[string]float64{"ok": 1, "denied": 1, "invalid": 1} {
		if got := promtest.ToFloat64(r.s.metrics.Pulls.WithLabelValues(result)); got != want {
			t.Errorf("gomsg_station_pulls_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if got := promtest.ToFloat64(r.s.metrics.PulledMessages); got != 2 {
		t.Errorf("gomsg_station_pulled_messages_total = %v, want 2", got)
	}
}

// The offline store down answers Unavailable (STORE_UNAVAILABLE); a failing
// ACK hook answers Unavailable and deletes nothing, and the same Pull again
// succeeds.
func TestPullOfflineUnavailable(t *testing.T) {
	t.Parallel()
	fail := true
	r := newPullRig(t, func(c *Config) {
		c.OnPullAck = func(context.Context, string, string, string, string, []int64) error {
			if fail {
				return errors.New("receipts down")
			}
			return nil
		}
	})
	if err := r.connect("jon", "ios", "1"); err != nil {
		t.Fatal(err)
	}
	seqs := r.storeMsgs("jon", 1, 4, time.Now(), 0)
	_, _, err := r.pull(testBoat, "jon", "1", seqs[:2], 10)
	if status.Code(grpcerr.Status(err)) != codes.Unavailable {
		t.Fatalf("pull with the hook failing: %v, want Unavailable", err)
	}
	if held, err := r.store.Held(context.Background(), "jon", "ios", seqs); err != nil || !slices.Equal(held, seqs) {
		t.Fatalf("stored after the failed hook: %v, %v; want all of %v (nothing deleted)", held, err, seqs)
	}
	fail = false
	msgs, _, err := r.pull(testBoat, "jon", "1", seqs[:2], 10)
	if err != nil || len(msgs) != 2 || msgs[0].GetSeq() != seqs[2] {
		t.Fatalf("pull again: %v, %v; want seqs %v", msgs, err, seqs[2:])
	}

	down := testutil.StartRedis(t)
	r.s.cfg.Offline = offline.New(down.Client(t))
	down.Stop()
	_, _, err = r.pull(testBoat, "jon", "1", seqs[2:], 10)
	if st := status.Convert(grpcerr.Status(err)); st.Code() != codes.Unavailable || grpcerr.DetailCode(st.Err()) != errorpb.Code_STORE_UNAVAILABLE {
		t.Fatalf("pull with the offline store down: %v, want Unavailable STORE_UNAVAILABLE", err)
	}
}

// BenchmarkPullOffline pages through a backlog of 10,000 messages of 200
// bytes on a real redis-server, 100 a Pull, each Pull ACKing the page
// before: the cost of the pull path without the network hops to the device.
func BenchmarkPullOffline(b *testing.B) {
	r := newRig(b, func(c *Config) { c.Platforms = platform.MustParse("ios:offline=168h/20000") })
	store := offline.New(r.rdb)
	r.s.cfg.Offline = store
	pol, _ := r.s.cfg.Platforms.Get("ios")
	if err := r.connect("ben", "ios", "1"); err != nil {
		b.Fatal(err)
	}
	const n = 10000
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		items := make([]offline.Item, n)
		now := time.Now()
		for i := range items {
			body, _ := proto.Marshal(&msgpb.Message{Seq: int64(i + 1), Timestamp: now.UnixMilli(), Body: &anypb.Any{Value: make([]byte, 200)}})
			items[i] = offline.Item{Platform: "ios", Policy: pol.Offline, Msg: offline.Message{Seq: int64(i + 1), Timestamp: now.UnixMilli(), Body: body}}
		}
		if _, err := store.Write(ctx, "ben", items); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var ack []int64
		got := 0
		for {
			msgs, more, err := r.s.PullOffline(ctx, testBoat, "ben", "1", ack, PullPage)
			if err != nil {
				b.Fatal(err)
			}
			got += len(msgs)
			ack = ack[:0]
			for _, m := range msgs {
				ack = append(ack, m.GetSeq())
			}
			if !more {
				break
			}
		}
		if _, _, err := r.s.PullOffline(ctx, testBoat, "ben", "1", ack, PullPage); err != nil {
			b.Fatal(err)
		}
		if got != n {
			b.Fatalf("pulled %d, want %d", got, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "msgs/s")
}
