package offline

import "time"

// SetKeyMargin lets a test wait for keys to expire without waiting a minute.
func SetKeyMargin(s *Store, d time.Duration) { s.margin = d }

// ErrTryAgainSpent is the error of a call Redis Cluster still refused
// tryAgainFor after the first refusal.
var ErrTryAgainSpent = errTryAgainSpent
