package bench

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"syscall"
)

// Machine describes where a report was measured.
type Machine struct {
	CPUs      int    `json:"cpus"`
	Model     string `json:"cpu_model"`
	MemTotal  string `json:"mem_total"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	// NoFile is the open-files limit the tool ran with (soft = hard after
	// RaiseNoFile); spawned processes inherit it.
	NoFile uint64 `json:"nofile_limit"`
}

func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// DescribeMachine reads the CPU model and memory from /proc.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Model: firstField("/proc/cpuinfo", "model name"),
		MemTotal: firstField("/proc/meminfo", "MemTotal"), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil {
		m.NoFile = r.Cur
	}
	return m
}

// RaiseNoFile raises the soft open-files limit to the hard limit and returns
// the new limit. Processes the tool starts inherit it.
func RaiseNoFile() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return 0, err
		}
	}
	return r.Cur, nil
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
