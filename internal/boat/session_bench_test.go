package boat

import "testing"

// BenchmarkSessionAckWait is the bookkeeping of one NEED_ACK message on a
// session: the push registers its wait, the client's ACK resolves it, the
// push forgets what is left. Seqs grow as they do in a stream.
//
//	go test -run x -bench SessionAckWait -benchmem ./internal/boat
func BenchmarkSessionAckWait(b *testing.B) {
	s := newSession("s", 4)
	seqs := []int64{0}
	b.ReportAllocs()
	for b.Loop() {
		seqs[0]++
		d := newDelivery(1)
		if err := s.expect(d, seqs); err != nil {
			b.Fatal(err)
		}
		s.ack(seqs)
		s.forget(d, seqs)
		if acked, err := d.result(); err != nil || len(acked) != 1 {
			b.Fatalf("acked %v, err %v", acked, err)
		}
	}
}
