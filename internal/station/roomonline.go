package station

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

var _ BoatDirectory = (*discovery.Boats)(nil)

// roomOnlineTimeout bounds the answer of one boat to RoomOnline: a boat
// that is down or slow is listed unreachable, it does not hold the call.
const roomOnlineTimeout = 2 * time.Second

// errNoBoats answers RoomOnline on a station built without a boat
// directory.
var errNoBoats = status.Error(codes.Unavailable, "room online: this station has no boat directory (it is not connected to etcd's boat registry)")

// RoomOnline asks every boat of the cluster, in parallel and each within
// roomOnlineTimeout, how many of its sessions are in a room. Boats that
// answer are summed and listed (those with members, by id); boats that do
// not are listed in unreachable_boats and not counted.
func (s *Station) RoomOnline(ctx context.Context, name string) (*pushpb.RoomOnlineResponse, error) {
	if err := room.Check(name); err != nil {
		return nil, grpcerr.Invalid("room", "%v", err)
	}
	if s.cfg.Boats == nil {
		return nil, errNoBoats
	}
	ids := slices.Sorted(slices.Values(s.cfg.Boats.IDs()))
	members := make([]int64, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			members[i], errs[i] = s.boatRoomOnline(ctx, id, name)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err // the caller gave up: no boat failed
	}
	resp := &pushpb.RoomOnlineResponse{Room: name}
	for i, id := range ids {
		switch {
		case errs[i] != nil:
			s.log.Warn("room online: boat did not answer", zap.String("boat", id), zap.Error(errs[i]))
			resp.UnreachableBoats = append(resp.UnreachableBoats, id)
		case members[i] > 0:
			resp.Members += members[i]
			resp.Boats = append(resp.Boats, &pushpb.BoatMembers{BoatId: id, Members: members[i]})
		}
	}
	return resp, nil
}

// boatRoomOnline asks one boat within roomOnlineTimeout.
func (s *Station) boatRoomOnline(ctx context.Context, boatID, name string) (int64, error) {
	resp, err := s.askBoatRooms(ctx, boatID, name)
	if err != nil {
		return 0, err
	}
	if len(resp.GetMembers()) != 1 || resp.GetMembers()[0] < 0 {
		return 0, fmt.Errorf("boat answered %v for one room", resp.GetMembers())
	}
	return resp.GetMembers()[0], nil
}

// askBoatRooms asks one boat, within roomOnlineTimeout, for its members of
// rooms and for how many rooms it holds sessions in.
func (s *Station) askBoatRooms(ctx context.Context, boatID string, rooms ...string) (*boatpb.RoomOnlineResponse, error) {
	if s.cfg.Boats == nil {
		return nil, errNoBoats
	}
	ctx, cancel := context.WithTimeout(ctx, roomOnlineTimeout)
	defer cancel()
	c, found, err := s.cfg.Boats.Client(ctx, boatID)
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, errors.New("boat left the directory")
	}
	return c.RoomOnline(ctx, &boatpb.RoomOnlineRequest{Rooms: rooms})
}
