package validate

import (
	"bufio"
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type instruction struct {
	cmd  string // upper case
	args string
}

// dockerfile reads the Dockerfile's instructions, joining continued lines and
// dropping comments, and groups them by stage.
func dockerfile(t *testing.T) (stages [][]instruction, args map[string]string) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	args = map[string]string{}
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, rest, _ := strings.Cut(line, " ")
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(rest)}
		switch {
		case in.cmd == "FROM":
			stages = append(stages, []instruction{in})
		case len(stages) == 0 && in.cmd == "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case len(stages) > 0:
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages, args
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages, args := dockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	// The builder's Go is the one go.mod asks for.
	gomod, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	from := strings.ReplaceAll(build[0].args, "${GO_VERSION}", args["GO_VERSION"])
	if m == nil || !strings.HasPrefix(from, "golang:"+string(m[1])) {
		t.Errorf("builder FROM %q, want golang:%s (go.mod)", from, m[1])
	}
	var buildText strings.Builder
	for _, in := range build {
		buildText.WriteString(in.cmd + " " + in.args + "\n")
	}
	// -tags nodev: the release gomsg leaves the embedded backends of `gomsg dev` out.
	for _, want := range []string{"CGO_ENABLED=0", "-tags nodev", "./cmd/gomsg ", "./cmd/gomsgctl"} {
		if !strings.Contains(buildText.String()+" ", want) {
			t.Errorf("build stage does not contain %q", want)
		}
	}

	base := strings.Fields(final[0].args)[0]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && !strings.HasPrefix(base, "alpine:") {
		t.Errorf("final base %q is not distroless static or alpine", base)
	}
	var user, entrypoint string
	var copied []string
	for _, in := range final {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			copied = append(copied, in.args)
		case "RUN":
			t.Errorf("final stage runs %q: the runtime image has no shell", in.args)
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("final stage runs as %q, want a non-root user", user)
	}
	if entrypoint != `["/gomsg"]` {
		t.Errorf("ENTRYPOINT %s, want [\"/gomsg\"] (the service is the command; compose health checks run /gomsg healthcheck)", entrypoint)
	}
	cp := strings.Join(copied, "\n")
	for _, bin := range []string{"gomsg", "gomsgctl"} {
		if !regexp.MustCompile(`--from=\S+ .*\S*/` + bin + `\b`).MatchString(cp) {
			t.Errorf("final stage does not copy %s from the build stage: %q", bin, cp)
		}
	}

	ignore, err := os.ReadFile(filepath.Join(repoRoot(t), ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(ignore))
	for _, need := range []string{"go.mod", "go.sum", "cmd", "internal", "pb", "client"} {
		for _, l := range lines {
			if strings.Trim(l, "/") == need || l == "*" {
				t.Errorf(".dockerignore excludes %s, which the build needs", need)
			}
		}
	}
}

// TestBinariesAreStatic checks the binaries, built with CGO_ENABLED=0 as in
// the Dockerfile, need no dynamic loader (distroless static has no libc).
func TestBinariesAreStatic(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"gomsg", "gomsgctl"} {
		f, err := elf.Open(binary(t, cmd))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a program interpreter: not static", cmd)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s links %v: not static", cmd, libs)
		}
		_ = f.Close()
	}
}
