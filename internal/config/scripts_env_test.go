package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// Every GOMSG_* variable the repository's scripts, Makefile and compose file
// use is one gomsg and gomsgctl accept: otherwise a developer who sets it (as
// the scripts invite) finds both binaries refusing to start.
func TestScriptVariablesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "scripts", "*.sh"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "..", "Makefile"), filepath.Join("..", "..", "docker-compose.yml"),
		filepath.Join("..", "..", ".ci", "run"))
	re := regexp.MustCompile(`GOMSG_[A-Z0-9_]*[A-Z0-9]`)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range re.FindAllString(string(b), -1) {
			seen++
			if !slices.Contains(EnvOnly, name) && !slices.Contains(ServiceEnv, name) {
				t.Errorf("%s uses %s, which gomsg and gomsgctl refuse as unknown: add it to EnvOnly or rename it", f, name)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no GOMSG_* variable found in the scripts: the file list is wrong")
	}
}
