package receipt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// On a Redis Cluster one pipeline writes receipts of seqs in many slots,
// and each seq reads back whole, a page at a time.
func TestStoreOnRedisCluster(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, 3, 0)
	s := receipt.NewStore(c.Client(t))
	var rs []*receiptpb.Receipt
	for seq := int64(1); seq <= 30; seq++ {
		for i := range 7 {
			rs = append(rs, &receiptpb.Receipt{Seq: seq, Uid: fmt.Sprintf("u%d", i), Platform: "web", State: receiptpb.State_ACCEPTED, At: 1},
				&receiptpb.Receipt{Seq: seq, Uid: fmt.Sprintf("u%d", i), Platform: "web", State: receiptpb.State_DROPPED, At: 2})
		}
	}
	if err := s.Write(context.Background(), time.Hour, rs); err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 30; seq++ {
		var n int
		token := ""
		for {
			p, err := s.Get(context.Background(), seq, "", 3, token)
			if err != nil {
				t.Fatal(err)
			}
			for _, tg := range p.Targets {
				if tg.State != receiptpb.State_DROPPED || len(tg.Steps) != 2 {
					t.Fatalf("seq %d: %v", seq, tg)
				}
			}
			n += len(p.Targets)
			if token = p.Next; token == "" {
				break
			}
		}
		if n != 7 {
			t.Fatalf("seq %d: %d targets, want 7", seq, n)
		}
	}
}
