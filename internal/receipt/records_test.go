package receipt

import (
	"testing"
	"time"

	"github.com/gomsg/gomsg/pb/receiptpb"
)

// Records stamps a receipt without a time with the recorder's clock, keeps
// a time already set, and fills every id.
func TestRecordsStampsMissingTimes(t *testing.T) {
	t.Parallel()
	r := New("r", nil)
	r.now = func() time.Time { return time.UnixMilli(5000) }
	unset := &receiptpb.Receipt{Seq: 1, Uid: "a", Platform: "ios", State: receiptpb.State_STORED}
	set := &receiptpb.Receipt{Seq: 2, Uid: "a", Platform: "ios", State: receiptpb.State_STORED, At: 42}
	recs, err := r.Records(unset, set)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Topic != "r" || recs[0].Key != "a" {
		t.Fatalf("records %v, want 2 of topic r keyed a", recs)
	}
	if unset.GetAt() != 5000 || set.GetAt() != 42 {
		t.Fatalf("times %d and %d, want 5000 (stamped) and 42 (kept)", unset.GetAt(), set.GetAt())
	}
	if unset.GetId() != "1/a/ios/3//0" || set.GetId() != "2/a/ios/3//0" {
		t.Fatalf("ids %q %q", unset.GetId(), set.GetId())
	}
}
