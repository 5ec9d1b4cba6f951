// Command fakecmd stands in for gomsg, gomsgctl and gomsg-bench in the
// checker's tests: it answers `version` as they do, and links zap so that it
// has a module to require.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/buildinfo"
)

func main() {
	_ = zap.NewNop()
	if len(os.Args) > 1 && os.Args[1] == "version" {
		if out := os.Getenv("FAKECMD_VERSION_OUTPUT"); out != "" {
			fmt.Println(out)
			return
		}
		fmt.Println(filepath.Base(os.Args[0]), buildinfo.Read())
	}
}
