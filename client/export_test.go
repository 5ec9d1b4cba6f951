package client

// WithDuplicateHook lets a test hear the seq of every duplicate dropped.
func WithDuplicateHook(f func(seq int64)) Option { return func(c *config) { c.duplicate = f } }

// SetPullAcks sets the ACKs c holds for its next Pull (seqs of pulled
// messages it had ACKed live).
func SetPullAcks(c *Client, seqs []int64) {
	c.pullMu.Lock()
	defer c.pullMu.Unlock()
	c.pullAcks = append(c.pullAcks[:0], seqs...)
}
