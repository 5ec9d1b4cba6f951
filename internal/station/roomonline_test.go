package station

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// roomBoat is a boat's gRPC server answering RoomOnline only, from a fixed
// count per room; with hang it never answers, with extra it answers one
// count more than it was asked for. The real boat's rooms are
// built in parallel with this station side, so a small stand-in serves
// here; everything between station and it (etcd registration, discovery's
// directory, gRPC) is real.
type roomBoat struct {
	boatpb.UnimplementedBoatServer
	members map[string]int64
	hang    bool
	extra   bool
}

func (b *roomBoat) RoomOnline(ctx context.Context, req *boatpb.RoomOnlineRequest) (*boatpb.RoomOnlineResponse, error) {
	if b.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	resp := &boatpb.RoomOnlineResponse{}
	for _, r := range req.GetRooms() {
		resp.Members = append(resp.Members, b.members[r])
	}
	if b.extra {
		resp.Members = append(resp.Members, 1)
	}
	return resp, nil
}

// startRoomBoat serves b on a free loopback port and returns its address
// and a function that stops it.
func startRoomBoat(t testing.TB, b *roomBoat) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	boatpb.RegisterBoatServer(srv, b)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), srv.Stop
}

// newBoatRegistry starts an embedded etcd and discovery's directory of the
// boats registered in it (the one the lead wires as Config.Boats), and
// returns the directory and a function registering a boat as boats register
// themselves, returning once the directory knows it.
func newBoatRegistry(t testing.TB) (*discovery.Boats, func(id, addr string)) {
	t.Helper()
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	dir := discovery.NewBoats(cli, zaptest.NewLogger(t), "/gomsg")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dir.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("boat directory: %v", err)
		}
	})
	register := func(id, addr string) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer pcancel()
		if _, err := cli.Put(pctx, discovery.BoatKey("/gomsg", id), addr); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, func() error {
			if !slices.Contains(dir.IDs(), id) {
				return fmt.Errorf("boat %s not in the directory %q", id, dir.IDs())
			}
			return nil
		})
	}
	return dir, register
}

// roomOnlineString is resp in a form a test compares: "room members
// [boat:members …] unreachable […]".
func roomOnlineString(resp *pushpb.RoomOnlineResponse) string {
	var boats []string
	for _, b := range resp.GetBoats() {
		boats = append(boats, fmt.Sprintf("%s:%d", b.GetBoatId(), b.GetMembers()))
	}
	return fmt.Sprintf("%s %d %v unreachable %v", resp.GetRoom(), resp.GetMembers(), boats, resp.GetUnreachableBoats())
}

// RoomOnline asks every registered boat: the members of those that answer
// are summed and listed by boat (boats without members left out); a boat
// that is down, does not answer within the bound or answers nonsense is
// listed unreachable and not counted. A bad room is refused, and a station without a boat
// directory answers Unavailable.
func TestRoomOnline(t *testing.T) {
	t.Parallel()
	s := validator(t, nil)
	ps := &pushServer{s: s}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := ps.RoomOnline(ctx, &pushpb.RoomOnlineRequest{Room: "lobby"})
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != status.Convert(errNoBoats).Message() {
		t.Fatalf("RoomOnline without a boat directory: %v, want Unavailable saying so", err)
	}

	dir, register := newBoatRegistry(t)
	s.cfg.Boats = dir
	_, err = s.RoomOnline(ctx, "a b")
	refusedAs(t, "room with a space", err, codes.InvalidArgument, `room: room name "a b": byte 1 is not printable ASCII (spaces are not allowed)`)
	_, err = ps.RoomOnline(ctx, &pushpb.RoomOnlineRequest{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "room: empty room name" {
		t.Fatalf("RoomOnline of no room: %v", err)
	}
	_, err = s.RoomOnline(ctx, "match-*")
	refusedAs(t, "room pattern", err, codes.InvalidArgument, `room: room name "match-*": '*' is not allowed in a room name`)

	resp, err := s.RoomOnline(ctx, "lobby")
	if err != nil || roomOnlineString(resp) != "lobby 0 [] unreachable []" {
		t.Fatalf("RoomOnline with no boats: %v, %v", roomOnlineString(resp), err)
	}

	a1, _ := startRoomBoat(t, &roomBoat{members: map[string]int64{"lobby": 3}})
	a2, stop2 := startRoomBoat(t, &roomBoat{members: map[string]int64{"lobby": 2, "other": 5}})
	a3, _ := startRoomBoat(t, &roomBoat{members: map[string]int64{"other": 1}})
	register("boat-2", a2)
	register("boat-1", a1)
	register("boat-3", a3)
	for room, want := range map[string]string{
		"lobby": "lobby 5 [boat-1:3 boat-2:2] unreachable []",
		"other": "other 6 [boat-2:5 boat-3:1] unreachable []",
		"empty": "empty 0 [] unreachable []",
	} {
		resp, err := ps.RoomOnline(ctx, &pushpb.RoomOnlineRequest{Room: room})
		if err != nil || roomOnlineString(resp) != want {
			t.Fatalf("RoomOnline(%s) = %s, %v; want %s", room, roomOnlineString(resp), err, want)
		}
	}

	stop2()
	resp, err = s.RoomOnline(ctx, "lobby")
	if err != nil || roomOnlineString(resp) != "lobby 3 [boat-1:3] unreachable [boat-2]" {
		t.Fatalf("RoomOnline with boat-2 down: %s, %v", roomOnlineString(resp), err)
	}

	// A boat that never answers holds the call for the bound only; a boat
	// whose answer does not match the question is not counted.
	a4, _ := startRoomBoat(t, &roomBoat{hang: true})
	register("boat-4", a4)
	a5, _ := startRoomBoat(t, &roomBoat{members: map[string]int64{"other": 7}, extra: true})
	register("boat-5", a5)
	start := time.Now()
	resp, err = s.RoomOnline(ctx, "other")
	took := time.Since(start)
	if err != nil || roomOnlineString(resp) != "other 1 [boat-3:1] unreachable [boat-2 boat-4 boat-5]" {
		t.Fatalf("RoomOnline with boat-4 hanging: %s, %v", roomOnlineString(resp), err)
	}
	if took < roomOnlineTimeout || took > roomOnlineTimeout+3*time.Second {
		t.Fatalf("RoomOnline with boat-4 hanging took %s, want about %s", took, roomOnlineTimeout)
	}

	// The caller giving up is its own error, not unreachable boats.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := ps.RoomOnline(cctx, &pushpb.RoomOnlineRequest{Room: "lobby"}); status.Code(err) != codes.Canceled {
		t.Fatalf("RoomOnline with the caller gone: %v, want Canceled", err)
	}
}
