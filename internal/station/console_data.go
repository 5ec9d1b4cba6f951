package station

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// The console's reads. They show what the cluster and a user look like,
// never a device token (a token is shown as the start of its SHA-256), a
// key or a message body.

// consoleRecentSeqs is how many of a platform's newest offline seqs the
// user page lists.
const consoleRecentSeqs = 10

// writeConsoleJSON answers v as JSON.
func writeConsoleJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// writeConsoleError answers err as the Push API answers it: its gRPC
// status mapped to the HTTP code, in the API's error shape.
func writeConsoleError(w http.ResponseWriter, err error) {
	st := status.Convert(grpcerr.Status(err))
	writeHTTPError(w, runtime.HTTPStatusFromCode(st.Code()), st)
}

type consoleWhoami struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
}

// consoleWhoami names the key the page logged in with and its scopes, so
// the page shows only what the key may do.
func (s *Station) consoleWhoami(w http.ResponseWriter, r *http.Request) {
	k := apikey.FromContext(r.Context())
	out := consoleWhoami{Scopes: []string{}}
	if k != nil {
		out.Name = k.Name
		if k.Cert != "" && out.Name == "" {
			out.Name = apikey.CertPrefix + k.Cert
		}
		for _, sc := range apikey.Scopes {
			if k.Allows(sc) && sc != apikey.All {
				out.Scopes = append(out.Scopes, string(sc))
			}
		}
	}
	writeConsoleJSON(w, out)
}

type consoleBoat struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Sessions recorded for the boat in Redis; -1 when Redis did not answer.
	Sessions int64 `json:"sessions"`
	// Rooms the boat holds at least one session in, as the boat says;
	// -1 when it did not answer.
	Rooms int64 `json:"rooms"`
	// LeaseTTL is what is left of the boat's etcd lease, LeaseGranted its
	// length, in seconds; -1 when etcd did not say.
	LeaseTTL     int64 `json:"leaseTtlS"`
	LeaseGranted int64 `json:"leaseGrantedS"`
}

type consoleMember struct {
	Node     int    `json:"node"`
	Service  string `json:"service"`
	LeaseTTL int64  `json:"leaseTtlS"`
}

type consoleDLQ struct {
	// Available is false where station has no dead-letter tools (NATS).
	Available bool   `json:"available"`
	Records   int64  `json:"records"`
	OldestMs  int64  `json:"oldestMs,omitempty"`
	Error     string `json:"error,omitempty"`
}

type consoleCluster struct {
	Boats   []consoleBoat   `json:"boats"`
	Members []consoleMember `json:"members"`
	DLQ     consoleDLQ      `json:"dlq"`
	// Lag is the carriers' consumer lag per topic, read from the brokers.
	Lag consoleLag `json:"lag"`
	// Rates are station's counters' rates since an earlier reading.
	Rates   consoleRatesAnswer `json:"rates"`
	Station string             `json:"station"`
	// Errors name the sources that did not answer; what they feed is shown
	// as unknown (-1) rather than as zero.
	Errors []string `json:"errors"`
}

// consoleCluster lists the boats (etcd discovery, session counts from
// Redis), every process holding a node id (stations, carriers, horns,
// boats), the dead-letter list's depth, the carriers' consumer lag and
// station's rates.
func (s *Station) consoleCluster(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	out := consoleCluster{Boats: []consoleBoat{}, Members: []consoleMember{}, Errors: []string{}, Station: s.PushAddr()}
	// The brokers are asked while etcd and Redis are.
	lag := make(chan consoleLag, 1)
	go func() { lag <- s.carrierLag(ctx) }()
	s.clusterMembers(ctx, &out)
	out.Lag = <-lag
	for _, l := range out.Lag.Topics {
		if l.Error != "" {
			out.Errors = append(out.Errors, "kafka (lag of group "+l.Group+" on "+l.Topic+"): "+l.Error)
		}
	}
	out.Rates = s.rates()
	writeConsoleJSON(w, out)
}

// clusterMembers fills out's boats, node ids and dead-letter depth.
func (s *Station) clusterMembers(ctx context.Context, out *consoleCluster) {
	fail := func(what string, err error) { out.Errors = append(out.Errors, what+": "+err.Error()) }

	leases := map[clientv3.LeaseID][2]int64{}
	lease := func(id clientv3.LeaseID) [2]int64 {
		if id == 0 {
			return [2]int64{-1, -1}
		}
		if v, ok := leases[id]; ok {
			return v
		}
		v := [2]int64{-1, -1}
		if resp, err := s.etcd.TimeToLive(ctx, id); err == nil {
			v = [2]int64{resp.TTL, resp.GrantedTTL}
		}
		leases[id] = v
		return v
	}
	if s.etcd == nil {
		fail("etcd", errors.New("station has no etcd client"))
		return
	}
	prefix := discovery.BoatsPrefix(s.cfg.EtcdPrefix)
	if resp, err := s.etcd.Get(ctx, prefix, clientv3.WithPrefix()); err != nil {
		fail("etcd (boats)", err)
	} else {
		for _, kv := range resp.Kvs {
			b := consoleBoat{ID: strings.TrimPrefix(string(kv.Key), prefix), Addr: string(kv.Value), Sessions: -1, Rooms: -1}
			l := lease(clientv3.LeaseID(kv.Lease))
			b.LeaseTTL, b.LeaseGranted = l[0], l[1]
			n, err := s.sessions.CountBoat(ctx, b.ID)
			if err != nil {
				fail("redis (sessions of boat "+b.ID+")", err)
			} else {
				b.Sessions = n
			}
			out.Boats = append(out.Boats, b)
		}
		// Each boat says how many rooms it holds, all asked at once.
		var wg sync.WaitGroup
		errs := make([]error, len(out.Boats))
		for i := range out.Boats {
			wg.Go(func() {
				resp, err := s.askBoatRooms(ctx, out.Boats[i].ID)
				if errs[i] = err; err == nil {
					out.Boats[i].Rooms = resp.GetRooms()
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				fail("boat "+out.Boats[i].ID+" (rooms)", err)
			}
		}
	}
	nodes := s.cfg.EtcdPrefix + "/nodes/"
	if resp, err := s.etcd.Get(ctx, nodes, clientv3.WithPrefix()); err != nil {
		fail("etcd (node ids)", err)
	} else {
		for _, kv := range resp.Kvs {
			n, _ := strconv.Atoi(strings.TrimPrefix(string(kv.Key), nodes))
			out.Members = append(out.Members, consoleMember{Node: n, Service: string(kv.Value), LeaseTTL: lease(clientv3.LeaseID(kv.Lease))[0]})
		}
		slices.SortFunc(out.Members, func(a, b consoleMember) int { return a.Node - b.Node })
	}
	if s.cfg.DLQ != nil {
		out.DLQ.Available = true
		// The summaries' count only: no body leaves here.
		if resp, err := s.cfg.DLQ.List(ctx, &pushpb.ListDeadLettersRequest{Limit: 1000}); err != nil {
			out.DLQ.Records = -1
			out.DLQ.Error = status.Convert(grpcerr.Status(err)).Message()
		} else {
			out.DLQ.Records = resp.GetMatched()
			// The oldest is known when the answer holds every record.
			if recs := resp.GetRecords(); int64(len(recs)) == resp.GetMatched() {
				for _, rec := range recs {
					if out.DLQ.OldestMs == 0 || rec.GetDeadAt() < out.DLQ.OldestMs {
						out.DLQ.OldestMs = rec.GetDeadAt()
					}
				}
			}
		}
	}
}

type consoleSession struct {
	Sid      string `json:"sid"`
	Platform string `json:"platform"`
	BoatID   string `json:"boatId"`
	// SinceMs is when the session connected, read from its time-sortable
	// sid; 0 when the sid is not one.
	SinceMs int64 `json:"sinceMs"`
}

type consoleBacklog struct {
	Platform string `json:"platform"`
	Count    int64  `json:"count"`
	// Newest are the newest seqs waiting, newest first.
	Newest []string `json:"newest"`
}

type consoleDevice struct {
	Platform string `json:"platform"`
	Provider string `json:"provider"`
	// TokenSHA256 is the start of the token's SHA-256 in hex: enough to tell
	// devices apart, nothing a provider would accept.
	TokenSHA256  string `json:"tokenSha256"`
	AppID        string `json:"appId"`
	RegisteredAt int64  `json:"registeredAt"`
}

type consoleUser struct {
	UID      string           `json:"uid"`
	Sessions []consoleSession `json:"sessions"`
	Offline  []consoleBacklog `json:"offline"`
	Devices  []consoleDevice  `json:"devices"`
}

// consoleUser shows one uid: its sessions, its offline backlog per platform
// and its registered devices, tokens hashed.
func (s *Station) consoleUser(w http.ResponseWriter, r *http.Request) {
	uid := r.URL.Query().Get("uid")
	if err := validUID(uid); err != nil {
		writeConsoleError(w, err)
		return
	}
	ctx := r.Context()
	out := consoleUser{UID: uid, Sessions: []consoleSession{}, Offline: []consoleBacklog{}, Devices: []consoleDevice{}}
	sessions, err := s.sessions.List(ctx, uid)
	if err != nil {
		writeConsoleError(w, err)
		return
	}
	for _, ss := range sessions {
		cs := consoleSession{Sid: ss.Sid, Platform: ss.Platform, BoatID: ss.BoatID}
		if id, err := strconv.ParseInt(ss.Sid, 10, 64); err == nil && id > 0 {
			cs.SinceMs = idgen.Time(id).UnixMilli()
		}
		out.Sessions = append(out.Sessions, cs)
	}
	if s.cfg.Offline != nil {
		for _, p := range s.cfg.Platforms.Names() {
			n, seqs, err := s.cfg.Offline.Backlog(ctx, uid, p, consoleRecentSeqs)
			if err != nil {
				writeConsoleError(w, grpcerr.New(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "offline store: %v", err))
				return
			}
			b := consoleBacklog{Platform: p, Count: n, Newest: make([]string, len(seqs))}
			for i, seq := range seqs {
				b.Newest[i] = strconv.FormatInt(seq, 10) // a string, as the API writes int64
			}
			out.Offline = append(out.Offline, b)
		}
	}
	devices, err := s.ListDevices(ctx, uid)
	if err != nil {
		writeConsoleError(w, err)
		return
	}
	for _, d := range devices {
		sum := sha256.Sum256([]byte(d.GetToken()))
		out.Devices = append(out.Devices, consoleDevice{Platform: d.GetPlatform(), Provider: d.GetProvider(),
			TokenSHA256: hex.EncodeToString(sum[:8]), AppID: d.GetAppId(), RegisteredAt: d.GetRegisteredAt()})
	}
	writeConsoleJSON(w, out)
}
