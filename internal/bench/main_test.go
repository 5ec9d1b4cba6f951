package bench

import (
	"os"
	"testing"
)

// TestMain lets the test binary be the holder of boat A's sessions that an
// isolated disconnect run starts (it starts its own executable).
func TestMain(m *testing.M) {
	RunHolderIfAsked()
	os.Exit(m.Run())
}
