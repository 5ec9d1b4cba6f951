package boatclient

import (
	"context"
	"testing"
)

// BenchmarkPushMessagesStream is one delivery at a time over the Deliver
// stream to an in-process boat, the test boat's side counted too: what a
// carrier worker costs per push when pushes do not overlap.
//
//	go test -run x -bench PushMessagesStream -benchmem ./internal/boatclient
func BenchmarkPushMessagesStream(b *testing.B) {
	c := serve(b, newTestBoat())
	ctx := context.Background()
	r := req("s1", 1)
	if _, err := c.PushMessages(ctx, r); err != nil { // opens the stream
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.PushMessages(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}
