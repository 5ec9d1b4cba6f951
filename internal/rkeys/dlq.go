package rkeys

// DLQHandled is the hash of dead letters an operator redrove: field
// "<partition>:<offset>" of the dead-letter topic → the record's dead_at (Unix
// ms), so that a purge can forget the marks of what it purged.
// The same key in both layouts: it is only ever used on its own.
func (l Layout) DLQHandled() string { return "msg/dlq/handled" }

// DLQPurged is the Unix ms before which dead letters are purged (a string).
func (l Layout) DLQPurged() string { return "msg/dlq/purged" }

// DLQClaim is held (SET NX, with an expiry) by the station putting one dead
// letter back, "<partition>:<offset>" as in DLQHandled, so that two
// stations redriving at once put it back once.
func (l Layout) DLQClaim(id string) string { return "msg/dlq/claim/" + id }
