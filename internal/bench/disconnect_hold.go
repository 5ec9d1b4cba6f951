package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// holdEnv, when set in a process's environment, makes it the holder of
// boat A's sessions (RunHolderIfAsked) instead of what it was started as.
// Its value is the holdConfig as JSON.
const holdEnv = "GOMSG_BENCH_HOLD"

// holder is boat A's sessions as the disconnect scenario sees them: in the
// tool's own process, or in a process of their own (isolated).
type holder interface {
	// uid is session i's user.
	uid(i int) string
	// stuckReceived is how many messages the sessions that never ACK got.
	stuckReceived() int64
	// ended is closed once session i's stream ended (only for the range
	// the holder was asked to watch).
	ended(i int) <-chan struct{}
	// allEnded is closed once every session's stream has ended;
	// allEndedAt is when the last one did (valid once allEnded is closed).
	allEnded() <-chan struct{}
	allEndedAt() time.Time
	// pid is the process holding them.
	pid() int
	close()
}

// localHolder is boat A's sessions in the tool's process.
type localHolder struct {
	p    *sessions
	done chan struct{}
	at   time.Time
}

func newLocalHolder(p *sessions) *localHolder {
	h := &localHolder{p: p, done: make(chan struct{})}
	go func() {
		h.at = lastEnd(p)
		close(h.done)
	}()
	return h
}

// lastEnd waits until every session of p has ended and returns when the
// last did (to the scheduler's delay).
func lastEnd(p *sessions) time.Time {
	for _, s := range p.list {
		<-s.done
	}
	return time.Now()
}

func (h *localHolder) uid(i int) string            { return h.p.list[i].uid }
func (h *localHolder) stuckReceived() int64        { return h.p.stuckReceived.Load() }
func (h *localHolder) ended(i int) <-chan struct{} { return h.p.list[i].done }
func (h *localHolder) allEnded() <-chan struct{}   { return h.done }
func (h *localHolder) allEndedAt() time.Time       { return h.at }
func (h *localHolder) pid() int                    { return os.Getpid() }
func (h *localHolder) close()                      { h.p.close() }

// holdConfig is what a holder process opens: N gRPC sessions (the first
// Held never ACK), and which sessions' ends it reports.
type holdConfig struct {
	ClientAddr     string        `json:"client_addr"`
	Secret         string        `json:"secret"`
	Platform       string        `json:"platform"`
	UIDPrefix      string        `json:"uid_prefix"`
	N              int           `json:"n"`
	StreamsPerConn int           `json:"streams_per_conn"`
	SourceSpread   int           `json:"source_spread"`
	Held           int           `json:"held"`
	WantOptions    uint32        `json:"want_options"`
	Timeout        time.Duration `json:"timeout"`
	EndedFrom      int           `json:"ended_from"`
	EndedTo        int           `json:"ended_to"`
}

// RunHolderIfAsked runs this process as a holder of sessions when the tool
// started it as one (holdEnv set) and then exits; otherwise it returns at
// once. Call it first in main (and in TestMain of a test that isolates).
//
// A holder writes lines to stdout: "opened K" while opening, "ready" once
// every session is, "received K" whenever the never-ACKing sessions' count
// of messages changes, "ended I" when session I of the watched range ends,
// "all-ended T" (unix ns) once every session's stream has, and "error …" if
// opening failed. It closes its sessions and exits when
// its stdin closes.
func RunHolderIfAsked() {
	v := os.Getenv(holdEnv)
	if v == "" {
		return
	}
	os.Exit(runHolder(v, os.Stdin, os.Stdout))
}

func runHolder(cfgJSON string, in io.Reader, out io.Writer) int {
	var cfg holdConfig
	w := &lineWriter{w: bufio.NewWriter(out)}
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		w.line("error %s: %v", holdEnv, err)
		return 2
	}
	p, err := openSessions(context.Background(), openConfig{ClientAddr: cfg.ClientAddr, Secret: cfg.Secret, Platform: cfg.Platform,
		UIDPrefix: cfg.UIDPrefix, N: cfg.N, StreamsPerConn: cfg.StreamsPerConn, SourceSpread: cfg.SourceSpread, Timeout: cfg.Timeout,
		WaitReady: true, Stuck: cfg.Held, WantOptions: cfg.WantOptions,
		Progress: func(k int) { w.line("opened %d", k) }})
	if err != nil {
		w.line("error %s", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	defer p.close()
	for i := cfg.EndedFrom; i < min(cfg.EndedTo, cfg.N); i++ {
		go func() {
			<-p.list[i].done
			w.line("ended %d", i)
		}()
	}
	go func() { w.line("all-ended %d", lastEnd(p).UnixNano()) }()
	stop := make(chan struct{})
	go func() {
		var last int64 = -1
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if n := p.stuckReceived.Load(); n != last {
				last = n
				w.line("received %d", n)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	w.line("ready")
	_, _ = io.Copy(io.Discard, in)
	close(stop)
	return 0
}

// lineWriter writes whole lines, one writer at a time, each flushed.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) line(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
	_ = l.w.Flush()
}

// procHolder is boat A's sessions in a process of their own, run at the
// lowest CPU priority (nice 19).
type procHolder struct {
	cfg    holdConfig
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	prefix string
	recv   atomic.Int64
	ends   map[int]chan struct{}
	// allDone is closed once the holder reported every stream ended, at
	// allAt.
	allDone chan struct{}
	allAt   time.Time
	exited  chan error
}

// startHolder starts this executable as a holder of cfg's sessions under
// nice(1) and waits until they are all open. logf gets its progress.
func startHolder(ctx context.Context, cfg holdConfig, logf func(string, ...any)) (*procHolder, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	nice, err := exec.LookPath("nice")
	if err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(nice, "-n", "19", exe)
	dieWithParent(cmd)
	cmd.Env = append(os.Environ(), holdEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the holder of boat A's sessions: %w", err)
	}
	h := &procHolder{cfg: cfg, cmd: cmd, stdin: stdin, prefix: cfg.UIDPrefix, ends: make(map[int]chan struct{}),
		allDone: make(chan struct{}), exited: make(chan error, 1)}
	for i := cfg.EndedFrom; i < cfg.EndedTo; i++ {
		h.ends[i] = make(chan struct{})
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.handle(sc.Text(), ready, logf)
		}
		select {
		case ready <- errors.New("the holder exited before its sessions were open"):
		default:
		}
		h.exited <- cmd.Wait()
	}()
	select {
	case err := <-ready:
		if err != nil {
			h.close()
			return nil, err
		}
		return h, nil
	case <-ctx.Done():
		h.close()
		return nil, ctx.Err()
	}
}

func (h *procHolder) handle(line string, ready chan<- error, logf func(string, ...any)) {
	word, rest, _ := strings.Cut(line, " ")
	n, _ := strconv.ParseInt(rest, 10, 64)
	switch word {
	case "opened":
		logf("  opened %d/%d sessions (holder)", n, h.cfg.N)
	case "all-ended":
		h.allAt = time.Unix(0, n)
		close(h.allDone)
	case "ready":
		select {
		case ready <- nil:
		default:
		}
	case "received":
		h.recv.Store(n)
	case "ended":
		// The map is only read after start; the holder reports each end once.
		if ch, ok := h.ends[int(n)]; ok {
			close(ch)
		}
	case "error":
		select {
		case ready <- errors.New("holder: " + rest):
		default:
		}
	}
}

func (h *procHolder) uid(i int) string     { return h.prefix + strconv.Itoa(i) }
func (h *procHolder) stuckReceived() int64 { return h.recv.Load() }
func (h *procHolder) pid() int             { return h.cmd.Process.Pid }

// allEnded and allEndedAt: the holder's report, read by the same goroutine
// that closes allDone before it.
func (h *procHolder) allEnded() <-chan struct{} { return h.allDone }
func (h *procHolder) allEndedAt() time.Time     { return h.allAt }

// ended is only asked for the watched range, and each index once.
func (h *procHolder) ended(i int) <-chan struct{} { return h.ends[i] }

// close closes the holder's stdin and waits for it to close its sessions
// and exit, killing it after 30 s.
func (h *procHolder) close() {
	_ = h.stdin.Close()
	select {
	case <-h.exited:
	case <-time.After(30 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
	}
}
