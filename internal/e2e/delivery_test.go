package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// withDeliveryRetention sets how long carrier keeps a seq's receipts (with
// withReceipts) after the last.
func withDeliveryRetention(d time.Duration) option {
	return func(c *app.ClusterConfig) { c.Carrier.DeliveryRetention = d }
}

// recordReceipts publishes receipts as the services do.
func (e *env) recordReceipts(rs ...*receiptpb.Receipt) {
	e.t.Helper()
	prod := e.queueProducer()
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := receipt.New(receiptsTopic, prod).Record(ctx, rs...); err != nil {
		e.t.Fatal(err)
	}
}

// Receipts on the topic reach GetDelivery through carrier, over gRPC and
// HTTP/JSON alike, for a key with the delivery scope only; a key without
// it is refused; the records are gone retention after the last receipt.
func TestGetDeliveryFromReceipts(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		const deliveryKey = "e2e-delivery-only-key"
		e := start(t, queueOpt, withReceipts(), withDeliveryRetention(3*time.Second), withAPIKeys(
			apikey.Line(apiKey, []apikey.Scope{apikey.All}, "e2e"),
			apikey.Line(deliveryKey, []apikey.Scope{apikey.Delivery}, "delivery-only"),
			apikey.Line(onlineKey, []apikey.Scope{apikey.Online}, "online-only")))
		const seq = 1234567
		e.recordReceipts(
			&receiptpb.Receipt{Seq: seq, Uid: "zoe", Platform: "web", State: receiptpb.State_ACCEPTED, At: 1000},
			&receiptpb.Receipt{Seq: seq, Uid: "ann", Platform: "ios", State: receiptpb.State_ACCEPTED, At: 1000},
			&receiptpb.Receipt{Seq: seq, Uid: "ann", Platform: "web", State: receiptpb.State_ACCEPTED, At: 1000},
			&receiptpb.Receipt{Seq: seq, Uid: "ann", Platform: "ios", State: receiptpb.State_STORED, At: 1010},
			&receiptpb.Receipt{Seq: seq, Uid: "ann", Platform: "web", State: receiptpb.State_DELIVERED, At: 1005, Sid: "s1", BoatId: "boat-1", Acked: true},
			&receiptpb.Receipt{Seq: seq, Uid: "ann", Platform: "ios", State: receiptpb.State_NOTIFIED, At: 1020, Detail: "apns: 200"},
		)
		push := pushpb.NewPushClient(auth.WithBearer(e.rawPushConn(), deliveryKey))
		req := &pushpb.GetDeliveryRequest{Seq: seq, PageSize: 2}
		var first *pushpb.GetDeliveryResponse
		testutil.WaitFor(t, 20*time.Second, func() error {
			resp, err := push.GetDelivery(context.Background(), req)
			if err != nil {
				return err
			}
			// Each uid's receipts are on its own partition, applied apart:
			// wait for ann's three steps and for zoe's target (a next page).
			if len(resp.GetTargets()) != 2 || len(resp.GetTargets()[0].GetSteps()) != 3 || resp.GetNextPageToken() == "" {
				return fmt.Errorf("first page: %v", resp)
			}
			first = resp
			return nil
		})
		want := []string{"ann ios NOTIFIED", "ann web DELIVERED"}
		for i, tg := range first.GetTargets() {
			if got := fmt.Sprintf("%s %s %s", tg.GetUid(), tg.GetPlatform(), tg.GetState()); got != want[i] {
				t.Errorf("target %d: %s, want %s", i, got, want[i])
			}
		}
		if first.GetNextPageToken() == "" {
			t.Fatal("no second page")
		}
		second, err := push.GetDelivery(context.Background(), &pushpb.GetDeliveryRequest{Seq: seq, PageSize: 2, PageToken: first.GetNextPageToken()})
		if err != nil || len(second.GetTargets()) != 1 || second.GetTargets()[0].GetUid() != "zoe" || second.GetNextPageToken() != "" {
			t.Fatalf("second page: %v %v", second, err)
		}

		// HTTP/JSON answers the same.
		base := "http://" + e.gomsg.Station.PushHTTPAddr()
		resp, err := httpPostAuth(base+"/v1/delivery", fmt.Sprintf(`{"seq":"%d","pageSize":2}`, seq), "Bearer "+deliveryKey)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var viaHTTP pushpb.GetDeliveryResponse
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /v1/delivery: %d %s", resp.StatusCode, body)
		}
		if err := protojson.Unmarshal(body, &viaHTTP); err != nil {
			t.Fatalf("POST /v1/delivery: %v in %s", err, body)
		}
		if !proto.Equal(&viaHTTP, first) {
			t.Fatalf("HTTP answered %v, gRPC %v", &viaHTTP, first)
		}
		resp, err = httpPostAuth(base+"/v1/delivery", `{"seq":"999"}`, "Bearer "+deliveryKey)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("POST /v1/delivery of an unknown seq: %d %s, want 404", resp.StatusCode, body)
		}

		// A key without the delivery scope is refused, on both.
		online := pushpb.NewPushClient(auth.WithBearer(e.rawPushConn(), onlineKey))
		if _, err := online.GetDelivery(context.Background(), req); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("GetDelivery with an online-only key: %v, want PermissionDenied", err)
		}
		resp, err = httpPostAuth(base+"/v1/delivery", fmt.Sprintf(`{"seq":"%d"}`, seq), "Bearer "+onlineKey)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("POST /v1/delivery with an online-only key: %d, want 403", resp.StatusCode)
		}
		// And the delivery key can do nothing else.
		if _, err := push.Online(context.Background(), &pushpb.OnlineRequest{Uids: []string{"ann"}}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Online with a delivery-only key: %v, want PermissionDenied", err)
		}

		// 3s after the last receipt the records are gone.
		testutil.WaitFor(t, 20*time.Second, func() error {
			_, err := push.GetDelivery(context.Background(), req)
			if status.Code(err) != codes.NotFound {
				return fmt.Errorf("after the retention: %v, want NotFound", err)
			}
			return nil
		})
	})
}

// A real push that asks NEED_RECEIPTS, as the services record it:
// GetDelivery tells the online ACKing target ACCEPTED then DELIVERED (its
// session, acked), the offline one ACCEPTED then STORED, and the one whose
// device reads but never ACKs ACCEPTED then STORED too (never DELIVERED:
// the message waits in the store for a session that ACKs).
func TestGetDeliveryOfAPush(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withReceipts(), withAckWait(300*time.Millisecond))
		ann := e.connect("ann", "web", true)
		cy := e.connect("cy", "web", false)
		seq := e.pushText(&pushpb.PushRequest{Uids: []string{"ann", "bob", "cy"}, MsgOptions: optAck | optOffline | optReceipts,
			PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"web"}}}, "hello")
		ann.waitCount(t, 1)
		cy.waitCount(t, 1)
		want := []string{
			fmt.Sprintf("ann web DELIVERED: ACCEPTED, DELIVERED %s@boat-1 acked", ann.Sid),
			"bob web STORED: ACCEPTED, STORED",
			"cy web STORED: ACCEPTED, STORED",
		}
		testutil.WaitFor(t, 20*time.Second, func() error {
			resp, err := e.push.GetDelivery(context.Background(), &pushpb.GetDeliveryRequest{Seq: seq})
			if err != nil {
				return err
			}
			var got []string
			for _, tg := range resp.GetTargets() {
				line := fmt.Sprintf("%s %s %s:", tg.GetUid(), tg.GetPlatform(), tg.GetState())
				for i, st := range tg.GetSteps() {
					if i > 0 {
						line += ","
					}
					line += " " + st.GetState().String()
					if st.GetSid() != "" {
						line += " " + st.GetSid() + "@" + st.GetBoatId()
					}
					if st.GetAcked() {
						line += " acked"
					}
				}
				got = append(got, line)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("targets %q, want %q", got, want)
			}
			return nil
		})
	})
}
