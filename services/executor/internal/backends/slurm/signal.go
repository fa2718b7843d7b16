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
// A signal is a hint, never the truth: the backend answers it by reading
// that one job from slurmctld, and acts only on what slurmctld says. A
// forged or replayed signal can therefore at worst cause one read of a
// job; one without a valid token causes nothing.

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
	nudge func(attemptID string, jobID int64) bool
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
// attempt, job, node and token. 202: the attempt's job is looked at now;
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
	if !s.nudge(attemptID, jobID) {
		http.Error(w, "no such attempt", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}
