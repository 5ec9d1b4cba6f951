package station

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// deliveryRig is a station reading the delivery store of its Redis.
func deliveryRig(t *testing.T) (*rig, *receipt.Store) {
	t.Helper()
	r := newRig(t, nil)
	store := receipt.NewStore(r.rdb)
	r.s.cfg.Deliveries = store
	return r, store
}

func getDelivery(s *Station, req *pushpb.GetDeliveryRequest) (*pushpb.GetDeliveryResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return (&pushServer{s: s}).GetDelivery(ctx, req)
}

// Bad requests are InvalidArgument naming the field; nothing recorded is
// NotFound with the reasons it may have.
func TestGetDeliveryValidation(t *testing.T) {
	t.Parallel()
	r, store := deliveryRig(t)
	if err := store.Write(context.Background(), time.Hour, []*receiptpb.Receipt{
		{Seq: 11, Uid: "ann", Platform: "ios", State: receiptpb.State_ACCEPTED, At: 1},
		{Seq: 11, Uid: "bob", Platform: "ios", State: receiptpb.State_ACCEPTED, At: 1},
	}); err != nil {
		t.Fatal(err)
	}
	first, err := getDelivery(r.s, &pushpb.GetDeliveryRequest{Seq: 11, PageSize: 1})
	if err != nil || len(first.GetTargets()) != 1 || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v %v", first, err)
	}
	for _, c := range []struct {
		req   *pushpb.GetDeliveryRequest
		field string
	}{
		{&pushpb.GetDeliveryRequest{}, "seq"},
		{&pushpb.GetDeliveryRequest{Seq: -3}, "seq"},
		{&pushpb.GetDeliveryRequest{Seq: 11, PageSize: -1}, "page_size"},
		{&pushpb.GetDeliveryRequest{Seq: 11, PageSize: 1001}, "page_size"},
		{&pushpb.GetDeliveryRequest{Seq: 11, PageToken: "not-a-token"}, "page_token"},
		{&pushpb.GetDeliveryRequest{Seq: 11, PageToken: strings.Repeat("a", 2000)}, "page_token"},
		{&pushpb.GetDeliveryRequest{Seq: 12, PageToken: first.GetNextPageToken()}, "page_token"},
		{&pushpb.GetDeliveryRequest{Seq: 11, Uid: "bob", PageToken: first.GetNextPageToken()}, "page_token"},
		{&pushpb.GetDeliveryRequest{Seq: 11, Uid: "a b"}, "uid"},
		{&pushpb.GetDeliveryRequest{Seq: 11, Uid: "a/b"}, "uid"},
		{&pushpb.GetDeliveryRequest{Seq: 11, Uid: strings.Repeat("u", 129)}, "uid"},
	} {
		_, err := getDelivery(r.s, c.req)
		st := status.Convert(err)
		var field string
		for _, d := range st.Details() {
			if e, ok := d.(*errorpb.Error); ok {
				field = e.GetField()
			}
		}
		if st.Code() != codes.InvalidArgument || field != c.field || !strings.HasPrefix(st.Message(), c.field+": ") {
			t.Errorf("%v: %v (field %q), want InvalidArgument naming %s", c.req, err, field, c.field)
		}
	}
	if resp, err := getDelivery(r.s, &pushpb.GetDeliveryRequest{Seq: 11, PageToken: first.GetNextPageToken()}); err != nil ||
		len(resp.GetTargets()) != 1 || resp.GetTargets()[0].GetUid() != "bob" || resp.GetNextPageToken() != "" {
		t.Fatalf("second page: %v %v", resp, err)
	}
	_, err = getDelivery(r.s, &pushpb.GetDeliveryRequest{Seq: 12})
	if st := status.Convert(err); st.Code() != codes.NotFound ||
		st.Message() != "no delivery record for seq 12 (unknown, older than --delivery-retention, or receipts off)" {
		t.Fatalf("seq 12: %v, want NotFound", err)
	}
	_, err = getDelivery(r.s, &pushpb.GetDeliveryRequest{Seq: 11, Uid: "cid"})
	if st := status.Convert(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), "seq 11 for uid cid") {
		t.Fatalf("seq 11 of cid: %v, want NotFound naming the uid", err)
	}
}

// Once the retention after its last receipt passed, a seq is NotFound.
func TestGetDeliveryExpires(t *testing.T) {
	t.Parallel()
	r, store := deliveryRig(t)
	if err := store.Write(context.Background(), 500*time.Millisecond, []*receiptpb.Receipt{
		{Seq: 21, Uid: "ann", Platform: "web", State: receiptpb.State_ACCEPTED, At: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := getDelivery(r.s, &pushpb.GetDeliveryRequest{Seq: 21}); err != nil {
		t.Fatalf("right after the write: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if _, err := getDelivery(r.s, &pushpb.GetDeliveryRequest{Seq: 21}); status.Code(err) != codes.NotFound {
			return fmt.Errorf("seq 21: %v, want NotFound", err)
		}
		return nil
	})
}

// With Redis down GetDelivery is Unavailable (STORE_UNAVAILABLE): retry.
func TestGetDeliveryRedisDown(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	rdb := testutil.StartRedis(t)
	r.s.cfg.Deliveries = receipt.NewStore(rdb.Client(t))
	rdb.Stop()
	_, err := getDelivery(r.s, &pushpb.GetDeliveryRequest{Seq: 1})
	if status.Code(err) != codes.Unavailable || grpcerr.DetailCode(err) != errorpb.Code_STORE_UNAVAILABLE {
		t.Fatalf("Redis down: %v, want Unavailable STORE_UNAVAILABLE", err)
	}
}
