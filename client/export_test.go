package client

// WithDuplicateHook lets a test hear the seq of every duplicate dropped.
func WithDuplicateHook(f func(seq int64)) Option { return func(c *config) { c.duplicate = f } }
