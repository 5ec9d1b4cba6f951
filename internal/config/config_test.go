package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParsePrecedence(t *testing.T) {
	t.Setenv("GOMSG_REDIS_ADDR", "env:1")
	t.Setenv("GOMSG_ACK_WAIT", "3s")
	t.Setenv("GOMSG_KAFKA_BROKERS", "a:1, b:2")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	redis := fs.String("redis-addr", "def:1", "")
	ack := fs.Duration("ack-wait", time.Second, "")
	workers := fs.Int("workers", 8, "")
	var brokers List
	fs.Var(&brokers, "kafka-brokers", "")
	if err := Parse(fs, []string{"--redis-addr", "flag:1"}); err != nil {
		t.Fatal(err)
	}
	if *redis != "flag:1" || *ack != 3*time.Second || *workers != 8 {
		t.Fatalf("redis=%s ack=%s workers=%d", *redis, *ack, *workers)
	}
	if brokers.String() != "a:1,b:2" {
		t.Fatalf("brokers = %v", brokers)
	}
}

func TestParseBadEnvNamesSetting(t *testing.T) {
	t.Setenv("GOMSG_ACK_WAIT", "soon")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Duration("ack-wait", time.Second, "")
	err := Parse(fs, nil)
	if err == nil || !strings.Contains(err.Error(), "GOMSG_ACK_WAIT") || !strings.Contains(err.Error(), "--ack-wait") {
		t.Fatalf("err = %v, want one naming GOMSG_ACK_WAIT and --ack-wait", err)
	}
}
