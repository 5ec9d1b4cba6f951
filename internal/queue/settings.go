package queue

import (
	"fmt"
	"time"
)

// ConsumerSettings are the consumer settings an operator sets, shared by the
// services that consume (carrier, horn).
type ConsumerSettings struct {
	// PartitionBufferBytes bounds the bytes of records fetched and not yet
	// finished per assigned partition (--partition-buffer-bytes); at the
	// bound that partition stops fetching. Default 4 MiB.
	PartitionBufferBytes int64
	// SessionTimeout is how long the group waits for a member that stopped
	// heartbeating before its partitions go to the others
	// (--queue-session-timeout): the pause a crashed member causes. Default
	// 6s. Below 6s the brokers must allow it (group.min.session.timeout.ms,
	// 6s by default), or the consumer never joins its group.
	SessionTimeout time.Duration
}

// Defaults fills unset fields.
func (s *ConsumerSettings) Defaults() {
	if s.PartitionBufferBytes == 0 {
		s.PartitionBufferBytes = 4 << 20
	}
	if s.SessionTimeout == 0 {
		s.SessionTimeout = 6 * time.Second
	}
}

// Validate names the first bad setting.
func (s ConsumerSettings) Validate() error {
	switch {
	case s.PartitionBufferBytes < 1024:
		return fmt.Errorf("--partition-buffer-bytes: %d, must be at least 1024", s.PartitionBufferBytes)
	case s.SessionTimeout < 2*time.Second || s.SessionTimeout > 5*time.Minute:
		// The heartbeat goes every second; several must fit in a session.
		return fmt.Errorf("--queue-session-timeout: %s, must be between 2s and 5m", s.SessionTimeout)
	}
	return nil
}

// Apply sets the fields of cfg that s governs.
func (s ConsumerSettings) Apply(cfg ConsumerConfig) ConsumerConfig {
	cfg.MaxBufferedBytes = s.PartitionBufferBytes
	cfg.SessionTimeout = s.SessionTimeout
	return cfg
}
