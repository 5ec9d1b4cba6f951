package session

import (
	"fmt"
	"strconv"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/internal/testutil"
)

// BenchmarkMemory measures what online sessions cost in Redis memory: the
// growth of INFO memory used_memory while users × platforms sessions are
// recorded through Store.Add as station's Connect records them (the
// default kick-older policy: session hash, connect order with its TTL, and
// the boat's index), spread over 4 boats. Uids are 15 characters, boat ids
// 27 (the length of a Kubernetes pod name), sids minted by idgen as boats
// mint them. B/user-ended is what stays once every session has ended
// (RemoveMany, as boats report them): the user's connect order, kept 7 days
// after the user's last connect. One iteration is one measurement:
//
//	go test -run x -bench Memory -benchtime 1x ./internal/session
func BenchmarkMemory(b *testing.B) {
	rdb := testutil.StartRedis(b).Client(b)
	s := New(rdb)
	gen, err := idgen.New(1)
	if err != nil {
		b.Fatal(err)
	}
	platforms := []string{"ios", "web"}
	for _, size := range []struct{ users, platforms int }{{100_000, 1}, {50_000, 2}} {
		b.Run(fmt.Sprintf("users=%d/platforms=%d", size.users, size.platforms), func(b *testing.B) {
			var delta, ended int64
			for b.Loop() {
				testutil.FlushAll(b, rdb)
				before := testutil.UsedMemory(b, rdb)
				refs := make([]Ref, 0, size.users*size.platforms)
				for u := range size.users {
					uid := fmt.Sprintf("user-%010d", u)
					boat := "gomsg-boat-7d9f8c6b4-x2k4q" + strconv.Itoa(u%4)
					for range size.platforms {
						id, err := gen.Next()
						if err != nil {
							b.Fatal(err)
						}
						refs = append(refs, Ref{UID: uid, Sid: strconv.FormatInt(id, 10), BoatID: boat})
					}
				}
				var g errgroup.Group
				g.SetLimit(32)
				for i, r := range refs {
					g.Go(func() error {
						sess := Session{Sid: r.Sid, Platform: platforms[i%size.platforms], BoatID: r.BoatID}
						_, err := s.Add(b.Context(), r.UID, sess, Caps{PerUID: 16}, true)
						return err
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
				n, err := rdb.DBSize(b.Context()).Result()
				if err != nil || n != int64(2*size.users+4) {
					b.Fatalf("%d keys, want %d (a session hash and a connect order per user, 4 boat indexes): %v", n, 2*size.users+4, err)
				}
				delta = testutil.UsedMemory(b, rdb) - before
				for i := 0; i < len(refs); i += 500 {
					removed, err := s.RemoveMany(b.Context(), refs[i:min(i+500, len(refs))])
					if err != nil {
						b.Fatal(err)
					}
					for j, r := range removed {
						if r.Sid == "" {
							b.Fatalf("session %v was not recorded", refs[i+j])
						}
					}
				}
				if n, err := rdb.DBSize(b.Context()).Result(); err != nil || n != int64(size.users) {
					b.Fatalf("%d keys once the sessions ended, want %d (a connect order per user): %v", n, size.users, err)
				}
				ended = testutil.UsedMemory(b, rdb) - before
			}
			b.ReportMetric(float64(delta)/float64(size.users*size.platforms), "B/session")
			b.ReportMetric(float64(delta)/float64(size.users), "B/user")
			b.ReportMetric(float64(ended)/float64(size.users), "B/user-ended")
		})
	}
}
