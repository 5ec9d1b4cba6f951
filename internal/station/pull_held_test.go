package station

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An ACK of seqs the store does not hold deletes nothing: only the held
// seqs of a Pull's ACK reach the delete script (one ZREM each), however
// many others the device sends.
func TestPullAckDeletesOnlyHeldSeqs(t *testing.T) {
	t.Parallel()
	r := newPullRig(t, nil)
	if err := r.connect("hal", "ios", "1"); err != nil {
		t.Fatal(err)
	}
	stored := r.storeMsgs("hal", 7000, 5, time.Now(), 0)
	ack := []int64{stored[0], stored[1]}
	for i := range 998 {
		ack = append(ack, 900000+int64(i)) // never stored
	}
	ctx := context.Background()
	if err := r.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	msgs, _, err := r.pull(testBoat, "hal", "1", ack, 0)
	if err != nil {
		t.Fatal(err)
	}
	var left []int64
	for _, m := range msgs {
		left = append(left, m.GetSeq())
	}
	if !slices.Equal(left, stored[2:]) {
		t.Fatalf("pulled %v after the ACK, want %v", left, stored[2:])
	}
	if n := commandCalls(t, r, "zrem"); n != 2 {
		t.Fatalf("%d ZREM calls for an ACK of 2 held and 998 unknown seqs, want 2", n)
	}
	// An ACK of nothing held runs no delete at all.
	if err := r.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.pull(testBoat, "hal", "1", ack[2:], 0); err != nil {
		t.Fatal(err)
	}
	if n := commandCalls(t, r, "zrem"); n != 0 {
		t.Fatalf("%d ZREM calls for an ACK of seqs never stored, want 0", n)
	}
}

// commandCalls is how many times the rig's Redis ran cmd since its stats
// were reset (commands run by scripts included).
func commandCalls(t *testing.T, r *pullRig, cmd string) int {
	t.Helper()
	info, err := r.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 0
}
