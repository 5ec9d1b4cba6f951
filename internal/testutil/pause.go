package testutil

import (
	"slices"
	"time"
)

// LongestPause is the longest time in [from, to] without an arrival (from
// counts as the start of the first gap; a zero to means no end: up to the
// last arrival); at is where that pause began, relative to from. arrivals
// need not be sorted.
func LongestPause(arrivals []time.Time, from, to time.Time) (pause, at time.Duration) {
	all := slices.Clone(arrivals)
	slices.SortFunc(all, time.Time.Compare)
	prev := from
	for _, a := range all {
		if a.Before(from) {
			continue
		}
		end := !to.IsZero() && !a.Before(to)
		if end {
			a = to
		}
		if gap := a.Sub(prev); gap > pause {
			pause, at = gap, prev.Sub(from)
		}
		prev = a
		if end {
			break
		}
	}
	return pause, at
}
