package e2etest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Replicas runs replicas of one job as separate `processor run` processes,
// each with its own log file and state directory (kept across its
// restarts, so local recovery can reuse it).
type Replicas struct {
	t    testing.TB
	bin  string
	cfg  string
	dir  string
	opts ReplicaOptions

	mu      sync.Mutex
	next    int
	running map[string]*Proc
}

// ReplicaOptions adjust how replicas start.
type ReplicaOptions struct {
	// Storage is checkpoint.storage; default file://<dir>/checkpoints.
	Storage string
	// Env is added to each process's environment.
	Env []string
	// HTTP serves /metrics, /healthz and /readyz on a free loopback port
	// (Proc.HTTPAddr).
	HTTP bool
	// Flags are added to every `processor run`.
	Flags []string
}

// Proc is one run of one replica.
type Proc struct {
	ID      string
	cmd     *exec.Cmd
	logPath string
	logFrom int64 // where this run's lines start in the log file
	done    chan struct{}
	err     error // set before done closes
}

// NewReplicas prepares replicas of the job in cfgFile, with logs and state
// under dir. Every replica still running when the test ends is killed.
func NewReplicas(t testing.TB, bin, cfgFile, dir string, opts ReplicaOptions) *Replicas {
	if opts.Storage == "" {
		opts.Storage = "file://" + filepath.Join(dir, "checkpoints")
	}
	r := &Replicas{t: t, bin: bin, cfg: cfgFile, dir: dir, opts: opts, running: map[string]*Proc{}}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.running {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return r
}

// SetStorage sets checkpoint.storage and extra environment (credentials)
// for the replicas started from now on.
func (r *Replicas) SetStorage(url string, env ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opts.Storage = url
	r.opts.Env = append(r.opts.Env, env...)
}

// StateDir is replica id's state.dir.
func (r *Replicas) StateDir(id string) string { return filepath.Join(r.dir, "state-"+id) }

// LogPath is replica id's log file (all its runs, appended).
func (r *Replicas) LogPath(id string) string { return filepath.Join(r.dir, id+".log") }

// Start starts a new replica r<N> and returns its ID.
func (r *Replicas) Start() string {
	r.mu.Lock()
	id := fmt.Sprintf("r%d", r.next)
	r.next++
	r.mu.Unlock()
	r.Restart(id)
	return id
}

// Restart starts replica id again (it must not be running), with extra
// flags for this run only.
func (r *Replicas) Restart(id string, flags ...string) *Proc {
	r.t.Helper()
	logPath := r.LogPath(id)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	defer logf.Close()
	st, err := logf.Stat()
	if err != nil {
		r.t.Fatal(err)
	}
	args := []string{"run", "-c", r.cfg,
		"--process.replica_id=" + id,
		"--state.dir=" + r.StateDir(id),
	}
	r.mu.Lock()
	opts := r.opts
	r.mu.Unlock()
	args = append(args, "--checkpoint.storage="+opts.Storage)
	if opts.HTTP {
		args = append(args, "--http.address=127.0.0.1:0")
	}
	args = append(append(args, opts.Flags...), flags...)
	cmd := exec.Command(r.bin, args...)
	cmd.Env = append(childEnv(), opts.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	p := &Proc{ID: id, cmd: cmd, logPath: logPath, logFrom: st.Size(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	r.mu.Lock()
	r.running[id] = p
	r.mu.Unlock()
	return p
}

// childEnv is this process's environment without WEIR_* variables: the
// test's own (WEIR_KAFKA_BROKERS of the shared broker, say) would override
// the job's YAML, whose file and flags are a replica's whole configuration.
// Command is the processor binary running a command (such as "resume")
// on the replicas' configuration file, in their environment.
func (r *Replicas) Command(ctx context.Context, command string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.bin, append([]string{command, "-c", r.cfg}, args...)...)
	cmd.Env = childEnv()
	return cmd
}

func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEIR_") {
			env = append(env, kv)
		}
	}
	return env
}

// Exited returns an error naming the replicas that exited by themselves
// (neither killed nor stopped by the test) with the end of their logs, or
// nil if every replica started is still running.
func (r *Replicas) Exited() error {
	var errs []error
	for _, id := range r.IDs() {
		p := r.Proc(id)
		select {
		case <-p.done:
			log := strings.TrimRight(p.Log(), "\n")
			if lines := strings.Split(log, "\n"); len(lines) > 20 {
				log = strings.Join(lines[len(lines)-20:], "\n")
			}
			errs = append(errs, fmt.Errorf("replica %s exited by itself: %v; its log ends:\n%s", id, p.err, log))
		default:
		}
	}
	return errors.Join(errs...)
}

// Proc returns the current run of replica id, or nil.
func (r *Replicas) Proc(id string) *Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[id]
}

// IDs lists the replicas started and not killed or stopped, sorted.
func (r *Replicas) IDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.running))
	for id := range r.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Kill sends SIGKILL to replica id and waits for it to end.
func (r *Replicas) Kill(id string) {
	r.mu.Lock()
	p := r.running[id]
	delete(r.running, id)
	r.mu.Unlock()
	if p == nil {
		r.t.Fatalf("kill %s: not running", id)
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// KillRandom kills a random running replica and returns its ID.
func (r *Replicas) KillRandom(rng *rand.Rand) string {
	ids := r.IDs()
	id := ids[rng.IntN(len(ids))]
	r.Kill(id)
	return id
}

// Signal sends sig to replica id (SIGSTOP, SIGCONT, ...).
func (r *Replicas) Signal(id string, sig syscall.Signal) {
	r.t.Helper()
	p := r.Proc(id)
	if p == nil {
		r.t.Fatalf("signal %s: not running", id)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("signal %v to %s: %v", sig, id, err)
	}
}

// StopGracefully stops replicas with SIGTERM until n remain, and checks
// that each exits 0 within 60 seconds.
func (r *Replicas) StopGracefully(n int) {
	for _, id := range r.IDs() {
		if len(r.IDs()) <= n {
			return
		}
		r.Stop(id)
	}
}

// Stop stops replica id with SIGTERM, as Kubernetes stops a pod, and
// checks that it exits 0 within 60 seconds.
func (r *Replicas) Stop(id string) {
	r.t.Helper()
	p := r.Proc(id)
	if p == nil {
		r.t.Fatalf("stop %s: not running", id)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			r.t.Errorf("replica %s after SIGTERM: %v (want exit 0)", id, p.err)
		}
	case <-time.After(60 * time.Second):
		r.t.Errorf("replica %s did not exit within 60s of SIGTERM", id)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	r.mu.Lock()
	delete(r.running, id)
	r.mu.Unlock()
}

// StopAll stops every replica gracefully.
func (r *Replicas) StopAll() { r.StopGracefully(0) }

// Forget drops replica id, which has exited by itself, from the running set.
func (r *Replicas) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, id)
}

// Done is closed when the process ends.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, valid after Done.
func (p *Proc) Err() error { return p.err }

// Log returns what this run of the replica has logged so far.
func (p *Proc) Log() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(p.logFrom, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Coordinator reports whether this run of the replica holds the
// coordinator role, by its last log line about the role.
func (p *Proc) Coordinator() bool {
	log := p.Log()
	hold := strings.LastIndex(log, "holding the coordinator role")
	gave := max(strings.LastIndex(log, "gave up the coordinator role"),
		strings.LastIndex(log, "coordinator role given up"))
	return hold >= 0 && hold > gave
}

var addrRE = regexp.MustCompile(`serving /metrics.*address=(\S+)`)

// HTTPAddr waits up to a minute for this run to log its HTTP address.
func (p *Proc) HTTPAddr() (string, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(bytes.NewReader([]byte(p.Log())))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				return strings.Trim(m[1], `"`), nil
			}
		}
		select {
		case <-p.done:
			return "", fmt.Errorf("replica %s exited before serving HTTP: %v", p.ID, p.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("replica %s logged no HTTP address within a minute", p.ID)
}

// Get fetches path from this run's HTTP endpoint and returns the status
// code and body.
func (p *Proc) Get(path string) (int, string, error) {
	addr, err := p.HTTPAddr()
	if err != nil {
		return 0, "", err
	}
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Coordinator waits up to timeout for exactly one running replica to hold
// the coordinator role and returns its ID.
func (r *Replicas) Coordinator(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		var holders []string
		for _, id := range r.IDs() {
			if p := r.Proc(id); p != nil && p.Coordinator() {
				holders = append(holders, id)
			}
		}
		if len(holders) == 1 {
			return holders[0], nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no single coordinator within %v: holders %v", timeout, holders)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
