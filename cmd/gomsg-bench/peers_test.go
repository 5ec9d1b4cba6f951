package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckoutRoot: peers finds the checkout from anywhere inside it, and
// outside one says to run it from the repository.
func TestCheckoutRoot(t *testing.T) {
	want, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := checkoutRoot(); err != nil || got != want {
		t.Errorf("checkoutRoot() = %q, %v; want %q", got, err, want)
	}
	t.Chdir(t.TempDir())
	if _, err := checkoutRoot(); err == nil || !strings.Contains(err.Error(), "not inside a gomsg checkout") {
		t.Errorf("outside a checkout: %v, want it named", err)
	}
	if _, err := os.Stat(filepath.Join(want, "bench", "peers", "go.mod")); err != nil {
		t.Fatal(err)
	}
}
