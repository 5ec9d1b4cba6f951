package discovery

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
)

// An etcd that does not answer when carrier lists the boats is retried: Run
// goes on, and the directory fills once etcd is reachable again.
func TestBoatsRetriesAListingThatFails(t *testing.T) {
	t.Parallel()
	ep := testutil.StartEtcd(t)
	direct := testutil.EtcdClient(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := direct.Put(ctx, BoatsPrefix("/gomsg")+"boat-1", "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}

	px := testutil.StartProxy(t, ep)
	cli := testutil.EtcdClient(t, px.Addr())
	px.Cut()
	b := NewBoats(cli, zaptest.NewLogger(t), "/gomsg")
	b.loadTimeout = 100 * time.Millisecond
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()

	// Several listings fail meanwhile (100 ms each, backoff from 100 ms).
	select {
	case err := <-done:
		t.Fatalf("Run ended while etcd was cut off: %v", err)
	case <-time.After(2 * time.Second):
	}
	if ids := b.IDs(); len(ids) != 0 {
		t.Fatalf("directory %q while cut off", ids)
	}
	px.Restore()
	testutil.WaitFor(t, 30*time.Second, func() error {
		if ids := b.IDs(); !slices.Contains(ids, "boat-1") {
			return testutil.Errorf("directory %q, want boat-1", ids)
		}
		return nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
