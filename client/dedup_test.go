package client

import "testing"

// The dedup remembers the last n seqs only, and an ACK given before the
// handler's own record (WithManualAck: Ack inside the handler) is kept.
func TestDedup(t *testing.T) {
	t.Parallel()
	d := newDedup(4)
	for seq := int64(1); seq <= 10; seq++ {
		d.add(seq, seq%2 == 0)
	}
	for seq := int64(1); seq <= 10; seq++ {
		seen, acked := d.seen(seq)
		if want := seq > 6; seen != want {
			t.Errorf("seen(%d) = %v, want %v", seq, seen, want)
		}
		if seen && acked != (seq%2 == 0) {
			t.Errorf("seq %d acked = %v", seq, acked)
		}
	}
	if len(d.acked) != 4 {
		t.Fatalf("%d seqs held, want the bound 4", len(d.acked))
	}
	d.ack([]int64{11})
	d.add(11, false)
	if seen, acked := d.seen(11); !seen || !acked {
		t.Fatalf("seq 11 ACKed before its record: seen %v acked %v", seen, acked)
	}
	d.add(9, true) // seen again: stays one entry
	if seen, acked := d.seen(9); !seen || !acked || len(d.acked) != 4 {
		t.Fatalf("seq 9: seen %v acked %v, %d held", seen, acked, len(d.acked))
	}
}
