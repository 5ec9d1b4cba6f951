package receipt

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/metrics"
)

// Validate refuses a configuration without topic or with a retention that
// is not positive; NewMaterializer fills unset workers and batch size and
// keeps set ones.
func TestMaterializerConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg     MaterializerConfig
		wantErr string
	}{
		{MaterializerConfig{Topic: "r", Retention: time.Nanosecond}, ""},
		{MaterializerConfig{Retention: time.Hour}, "no topic"},
		{MaterializerConfig{Topic: "r"}, "--delivery-retention: 0s, must be positive"},
		{MaterializerConfig{Topic: "r", Retention: -time.Second}, "--delivery-retention: -1s"},
	} {
		err := tc.cfg.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.wantErr)
		}
		if _, nerr := NewMaterializer(tc.cfg, nil, zaptest.NewLogger(t), metrics.New()); (nerr == nil) != (err == nil) {
			t.Errorf("NewMaterializer(%+v) = %v, want Validate's %v", tc.cfg, nerr, err)
		}
	}
	for _, tc := range []struct{ workers, batch, wantWorkers, wantBatch int }{
		{0, 0, 64, 256}, {-1, -1, 64, 256}, {1, 1, 1, 1}, {7, 300, 7, 300},
	} {
		mt, err := NewMaterializer(MaterializerConfig{Topic: "r", Retention: time.Hour, Workers: tc.workers, Batch: tc.batch},
			nil, zaptest.NewLogger(t), metrics.New())
		if err != nil {
			t.Fatal(err)
		}
		if mt.cfg.Workers != tc.wantWorkers || mt.cfg.Batch != tc.wantBatch {
			t.Errorf("workers %d batch %d: got %d and %d, want %d and %d", tc.workers, tc.batch,
				mt.cfg.Workers, mt.cfg.Batch, tc.wantWorkers, tc.wantBatch)
		}
	}
}
