package queue

import (
	"maps"
	"testing"
)

func TestOffsetTrackerCommitsUpToLowestUnfinished(t *testing.T) {
	t.Parallel()
	type step struct {
		track []int64 // offsets fetched, in order
		done  []int64 // offsets finished, in order
		want  int64   // commit point afterwards; -1: nothing to commit
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing finished", []step{{track: []int64{10, 11, 12}, want: -1}}},
		{"in order", []step{
			{track: []int64{10, 11, 12}, done: []int64{10}, want: 11},
			{done: []int64{11, 12}, want: 13},
		}},
		{"out of order waits for the lowest", []step{
			{track: []int64{10, 11, 12, 13}, done: []int64{13, 11, 12}, want: -1},
			{done: []int64{10}, want: 14},
		}},
		{"gap in the middle", []step{
			{track: []int64{0, 1, 2, 3, 4}, done: []int64{0, 1, 3, 4}, want: 2},
			{done: []int64{2}, want: 5},
		}},
		{"offsets need not be contiguous", []step{
			{track: []int64{5, 9, 20}, done: []int64{5, 20}, want: 9},
			{done: []int64{9}, want: 21},
		}},
		{"finishing twice or unknown offsets is harmless", []step{
			{track: []int64{1, 2}, done: []int64{1, 1, 7, 0}, want: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newOffsetTracker()
			for i, s := range tt.steps {
				for _, o := range s.track {
					if !tr.track(3, o) {
						t.Fatalf("step %d: track(%d) = false for a new offset", i, o)
					}
				}
				for _, o := range s.done {
					tr.done(3, o)
				}
				got := tr.uncommitted()
				want := map[int]int64{}
				if s.want >= 0 {
					want[3] = s.want
				}
				if len(got) != len(want) || (len(want) > 0 && got[3] != want[3]) {
					t.Fatalf("step %d: uncommitted = %v, want %v", i, got, want)
				}
				tr.committed(got)
				if again := tr.uncommitted(); len(again) != 0 {
					t.Fatalf("step %d: after committed(%v), uncommitted = %v", i, got, again)
				}
			}
		})
	}
}

func TestOffsetTrackerPartitionsAreIndependent(t *testing.T) {
	t.Parallel()
	tr := newOffsetTracker()
	for o := int64(0); o < 3; o++ {
		tr.track(0, o)
		tr.track(1, 100+o)
	}
	tr.done(0, 0)
	tr.done(1, 101)
	tr.done(1, 100)
	want := map[int]int64{0: 1, 1: 102}
	if got := tr.uncommitted(); !maps.Equal(got, want) {
		t.Errorf("uncommitted = %v, want %v", got, want)
	}
	if got := tr.inFlight(); got != 3 {
		t.Errorf("inFlight = %d, want 3", got)
	}
}

// After a rebalance the group hands the partition back at its committed
// offset, so offsets already tracked are fetched again.
func TestOffsetTrackerReseenOffsetsAfterRebalance(t *testing.T) {
	t.Parallel()
	tr := newOffsetTracker()
	for o := int64(0); o < 10; o++ {
		tr.track(0, o)
	}
	for o := int64(0); o < 5; o++ {
		tr.done(0, o)
	}
	tr.done(0, 7) // finished out of order
	tr.committed(tr.uncommitted())

	// Re-fetched from the committed offset 5: 5..9 are still running or
	// finished here and must not be dispatched a second time; lower ones
	// (committed) neither.
	for _, o := range []int64{5, 6, 7, 8, 9, 3} {
		if tr.track(0, o) {
			t.Errorf("track(%d) after rebalance = true, want false (already tracked)", o)
		}
	}
	if !tr.track(0, 10) {
		t.Error("track(10) = false, want true for a new offset")
	}
	if got := tr.uncommitted(); len(got) != 0 {
		t.Errorf("uncommitted = %v, want nothing until 5 finishes", got)
	}
	for _, o := range []int64{5, 6, 8, 9} {
		tr.done(0, o)
	}
	if got, want := tr.uncommitted(), map[int]int64{0: 10}; !maps.Equal(got, want) {
		t.Errorf("uncommitted = %v, want %v (10 still running)", got, want)
	}

	// The partition comes back after another member worked past it (and
	// committed 500): offsets jump forward; the tracker must not wait for
	// offsets it never saw.
	tr.done(0, 10)
	if !tr.track(0, 500) {
		t.Fatal("track(500) = false, want true")
	}
	if got, want := tr.uncommitted(), map[int]int64{0: 500}; !maps.Equal(got, want) {
		t.Errorf("uncommitted = %v, want %v", got, want)
	}
	tr.done(0, 500)
	if got, want := tr.uncommitted(), map[int]int64{0: 501}; !maps.Equal(got, want) {
		t.Errorf("uncommitted = %v, want %v", got, want)
	}
}

func TestOffsetTrackerCompactsLongRuns(t *testing.T) {
	t.Parallel()
	tr := newOffsetTracker()
	const n = 5000
	for o := int64(0); o < n; o++ {
		tr.track(0, o)
	}
	tr.done(0, n-1) // the last stays finished behind the others
	for o := int64(0); o < n-1; o++ {
		tr.done(0, o)
		if o == n/2 {
			if got := tr.uncommitted()[0]; got != o+1 {
				t.Fatalf("midway uncommitted = %d, want %d", got, o+1)
			}
			// More than half of the entries are finished: the slice was
			// compacted rather than kept whole.
			if p := tr.parts[0]; len(p.pending) != n-int(o)-1 || p.head != 0 {
				t.Fatalf("midway %d entries kept (head %d), want %d", len(p.pending), p.head, n-int(o)-1)
			}
		}
	}
	if got := tr.uncommitted()[0]; got != n {
		t.Errorf("uncommitted = %d, want %d", got, n)
	}
	if p := tr.parts[0]; len(p.pending) != 0 {
		t.Errorf("%d entries left after all finished", len(p.pending))
	}
}
