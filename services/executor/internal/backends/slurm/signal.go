package slurm

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The start signal (docs/slurm.md#the-start-signal): a placeholder's
// batch script tells the backend it runs, so that a start is known
// without waiting for a listing of every job in slurmctld, which grows
// with the cluster's queue. The script is a constant: everything it
// sends comes from its environment (the backend's address, the attempt,
// a token) or from Slurm (the job id, the node), and is only ever data
// of printf, never read by a shell.
//
// A signal with a valid token comes from the placeholder's own job: the
// token is in that job's environment only, which only its Slurm user and
// Slurm's administrators can read. What it says of the allocation (the
// node, the node list, the GPUs) is slurmd's own environment for the
// script, so the backend hands the task to that node at once, and reads
// the job from slurmctld alongside to confirm: a signal slurmctld
// contradicts (the job pends, or runs elsewhere) stops the task and fails
// the attempt. One without a valid token causes nothing; a replayed one
// finds the attempt started and is ignored. A signal that cannot say
// everything the hand-off needs (a GPU task without the GPUs' indexes)
// is a hint only: the job is read first, and acted on as slurmctld says.

// signalPath is where placeholders send their start signal.
const signalPath = "/slurm/v1/started"

// signalKeyFile keeps the signing key across restarts under the state
// directory: placeholders submitted by an earlier run still sign with it.
const signalKeyFile = "start-signal.key"

// startSignal receives placeholders' start signals and passes each
// valid one to its attempt's follower.
type startSignal struct {
	key []byte
	// host and port are what placeholders connect to.
	host, port string
	ln         net.Listener
	srv        *http.Server
	log        *slog.Logger
	// nudge passes a valid signal to the attempt's follower; false when
	// the backend holds no such attempt.
	nudge func(attemptID string, s startReport) bool
}

// startReport is what a placeholder's start signal says: its job, the
// node its script runs on, the job's node list and GPU indexes (Slurm's
// SLURMD_NODENAME, SLURM_JOB_NODELIST, SLURM_JOB_GPUS; empty when Slurm
// set none).
type startReport struct {
	jobID             int64
	node, nodes, gpus string
	// received is when the signal came: the attempt's follower may be in
	// a call to slurmctld or the server, and the log says how long the
	// signal waited for it.
	received time.Time
}

// job is the running job the report describes; ok is false when it does
// not say enough to hand a task asking for gpus GPUs to its node.
func (s startReport) job(gpus int) (j Job, ok bool) {
	if s.node == "" || (gpus > 0 && s.gpus == "") {
		return Job{}, false
	}
	j = Job{ID: s.jobID, State: StateRunning, Nodes: s.nodes, BatchHost: s.node}
	if j.Nodes == "" {
		j.Nodes = s.node
	}
	if s.gpus != "" {
		j.GRES = []string{"gpu(IDX:" + s.gpus + ")"}
	}
	return j, true
}

// newStartSignal listens on listen; advertise is the host:port the
// placeholders reach it at (empty: the listener's own address).
func newStartSignal(listen, advertise, stateDir string, log *slog.Logger) (*startSignal, error) {
	key, err := signalKey(stateDir)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("start signal: %w", err)
	}
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil || host == "" || port == "" {
		ln.Close()
		return nil, fmt.Errorf("start signal address %q: want host:port the nodes reach", advertise)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		ln.Close()
		return nil, fmt.Errorf("start signal address %q: bad port", advertise)
	}
	s := &startSignal{key: key, host: host, port: port, ln: ln, log: log}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	return s, nil
}

// signalKey reads the signing key from the state directory, making one
// there when there is none (a key per process without a directory).
func signalKey(stateDir string) ([]byte, error) {
	path := ""
	if stateDir != "" {
		path = filepath.Join(stateDir, signalKeyFile)
		if raw, err := os.ReadFile(path); err == nil && len(raw) == 32 {
			return raw, nil
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if path != "" {
		if err := os.WriteFile(path, key, 0o600); err != nil {
			return nil, fmt.Errorf("start signal key: %w", err)
		}
	}
	return key, nil
}

// token is the attempt's token: only the backend that submitted the
// placeholder can make it.
func (s *startSignal) token(attemptID string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("taskmesh slurm start\x00" + attemptID))
	return hex.EncodeToString(m.Sum(nil))
}

// env is what the placeholder needs to signal: its attempt, the
// backend's address and the token.
func (s *startSignal) env(attemptID string) map[string]string {
	return map[string]string{
		"TASKMESH_ATTEMPT_ID":   attemptID,
		"TASKMESH_SIGNAL_HOST":  s.host,
		"TASKMESH_SIGNAL_PORT":  s.port,
		"TASKMESH_SIGNAL_TOKEN": s.token(attemptID),
	}
}

// serve answers signals until close.
func (s *startSignal) serve() {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("start signal server", "err", err)
	}
}

func (s *startSignal) close() { _ = s.srv.Close() }

// Addr is the address the signal server listens on.
func (s *startSignal) Addr() string { return s.ln.Addr().String() }

// ServeHTTP takes one signal: POST signalPath with the form fields
// attempt, job, token, and what the placeholder knows of its allocation:
// node, nodes and gpus (startReport). 202: the attempt's job is looked at now;
// 400: malformed; 403: the token is not the attempt's; 404: the backend
// holds no such attempt (it ended, or is another backend's).
func (s *startSignal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != signalPath {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil {
		http.Error(w, "read the signal", http.StatusBadRequest)
		return
	}
	form, err := url.ParseQuery(string(raw))
	if err != nil {
		http.Error(w, "the signal is not a form", http.StatusBadRequest)
		return
	}
	attemptID, token := form.Get("attempt"), form.Get("token")
	jobID, err := strconv.ParseInt(form.Get("job"), 10, 64)
	if attemptID == "" || token == "" || err != nil || jobID <= 0 {
		http.Error(w, "attempt, job and token are required", http.StatusBadRequest)
		return
	}
	if !hmac.Equal([]byte(token), []byte(s.token(attemptID))) {
		s.log.Warn("start signal refused: bad token", "attempt_id", attemptID, "job_id", jobID, "remote", r.RemoteAddr)
		http.Error(w, "bad token", http.StatusForbidden)
		return
	}
	report := startReport{jobID: jobID, node: form.Get("node"), nodes: form.Get("nodes"), gpus: form.Get("gpus"), received: time.Now()}
	if !validNodeName(report.node) || !validNodeList(report.nodes) || !validGPUList(report.gpus) {
		http.Error(w, "node, nodes or gpus is malformed", http.StatusBadRequest)
		return
	}
	if !s.nudge(attemptID, report) {
		http.Error(w, "no such attempt", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// validNodeName, validNodeList and validGPUList accept what Slurm sets in
// SLURMD_NODENAME, SLURM_JOB_NODELIST ("node-[a-b],gpu7") and
// SLURM_JOB_GPUS ("0,1,2"), or nothing; a signal carrying anything else
// is refused, so nothing odd reaches a task's environment or a node's
// address.
func validNodeName(s string) bool { return len(s) <= 255 && onlyRunes(s, "-_.") }

func validNodeList(s string) bool { return len(s) <= 4096 && onlyRunes(s, "-_.,[]") }

func validGPUList(s string) bool {
	if len(s) > 1024 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && c != ',' && c != '-' {
			return false
		}
	}
	return true
}

func onlyRunes(s, extra string) bool {
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune(extra, c):
		default:
			return false
		}
	}
	return true
}
