package slurm

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClientConfig says how to reach slurmrestd.
type ClientConfig struct {
	// Endpoint is "unix:/path/slurmrestd.sock" (rest_auth/local: slurmrestd
	// takes the caller's identity from the socket) or "http(s)://host:port"
	// (rest_auth/jwt).
	Endpoint string
	// Version is the REST API version ("v0.0.38", "v0.0.40", …); empty
	// reads slurmrestd's OpenAPI document and takes the newest supported.
	Version string
	// UserName and TokenFile authenticate by JWT: the headers
	// X-SLURM-USER-NAME and X-SLURM-USER-TOKEN. The token is read from the
	// file again whenever the file changes (tokens expire and are
	// replaced); it is never logged.
	UserName, TokenFile string
	// TLS for an https endpoint (nil: the system's roots).
	TLS *tls.Config
	// Timeout bounds each call (default 30 s).
	Timeout time.Duration
}

// Client calls slurmrestd's job API in the version it serves.
type Client struct {
	http    *http.Client
	base    string
	dialect dialect
	user    string
	token   *tokenFile
}

// Slurm error numbers the backend tells apart.
const (
	errInvalidJobID = 2017 // ESLURM_INVALID_JOB_ID: unknown (or purged) job
	errAlreadyDone  = 2021 // ESLURM_ALREADY_DONE: the job has ended
	errAccessDenied = 2002 // ESLURM_ACCESS_DENIED
)

// ErrJobNotFound: slurmctld does not know the job (never submitted, or
// ended longer than MinJobAge ago).
var ErrJobNotFound = errors.New("slurm: no such job")

// APIError is a call slurmrestd refused, with Slurm's own errors.
type APIError struct {
	Op     string
	Status int
	Errors []restError
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slurmrestd %s: HTTP %d", e.Op, e.Status)
	for _, r := range e.Errors {
		msg := r.Description
		if msg == "" {
			msg = r.Error
		} else if r.Error != "" && !strings.Contains(msg, r.Error) {
			msg += " (" + r.Error + ")"
		}
		fmt.Fprintf(&b, ": %s", msg)
	}
	return b.String()
}

// has reports whether Slurm gave the error number n.
func (e *APIError) has(n int) bool {
	for _, r := range e.Errors {
		if r.number() == n {
			return true
		}
	}
	return false
}

// Message is Slurm's own words, without the HTTP frame: what a task's
// error shows when Slurm refuses its job.
func (e *APIError) Message() string {
	var parts []string
	for _, r := range e.Errors {
		if r.Error != "" {
			parts = append(parts, r.Error)
		} else if r.Description != "" {
			parts = append(parts, r.Description)
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return strings.Join(parts, "; ")
}

// Transient reports whether a call that failed with err may succeed when
// repeated: slurmrestd or slurmctld unreachable or busy, as opposed to a
// refusal of the request itself.
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrJobNotFound) {
		return false
	}
	var api *APIError
	if errors.As(err, &api) {
		if len(api.Errors) > 0 && api.Status < 500 {
			return false
		}
		for _, r := range api.Errors {
			// Slurm's own refusals come with numbers from 2000 on; socket
			// and protocol errors (slurmctld unreachable) are below.
			if n := r.number(); n >= 2000 && n < 5000 {
				return false
			}
		}
		return true
	}
	return true // transport errors
}

// NewClient returns a client of the configured slurmrestd; without a
// version it asks slurmrestd which it serves.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	c := &Client{user: cfg.UserName}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	switch {
	case strings.HasPrefix(cfg.Endpoint, "unix:"):
		path := strings.TrimPrefix(cfg.Endpoint, "unix:")
		if path == "" {
			return nil, errors.New("slurmrestd endpoint unix: needs a socket path")
		}
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		c.base = "http://slurmrestd"
	case strings.HasPrefix(cfg.Endpoint, "http://"), strings.HasPrefix(cfg.Endpoint, "https://"):
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("slurmrestd endpoint %q is not a URL", cfg.Endpoint)
		}
		c.base = strings.TrimSuffix(u.String(), "/")
		transport.TLSClientConfig = cfg.TLS
	default:
		return nil, fmt.Errorf("slurmrestd endpoint %q: want unix:/path or http(s)://host:port", cfg.Endpoint)
	}
	if cfg.TokenFile != "" {
		c.token = &tokenFile{path: cfg.TokenFile}
		if _, err := c.token.read(); err != nil {
			return nil, err
		}
	}
	c.http = &http.Client{Transport: transport, Timeout: cfg.Timeout}
	version := cfg.Version
	if version == "" {
		var err error
		if version, err = c.discover(ctx); err != nil {
			return nil, err
		}
	}
	d, err := dialectFor(version)
	if err != nil {
		return nil, err
	}
	c.dialect = d
	return c, nil
}

// Version is the REST API version in use.
func (c *Client) Version() string { return c.dialect.Version() }

// discover reads slurmrestd's OpenAPI document for the versions it serves.
func (c *Client) discover(ctx context.Context) (string, error) {
	var lastErr error
	for _, path := range []string{"/openapi/v3", "/openapi.json"} {
		status, raw, err := c.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			lastErr = err
			continue
		}
		if status != http.StatusOK {
			lastErr = fmt.Errorf("GET %s: HTTP %d", path, status)
			continue
		}
		var doc struct {
			Paths map[string]json.RawMessage `json:"paths"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			lastErr = fmt.Errorf("GET %s: %w", path, err)
			continue
		}
		paths := make([]string, 0, len(doc.Paths))
		for p := range doc.Paths {
			paths = append(paths, p)
		}
		return pickVersion(paths)
	}
	return "", fmt.Errorf("discover the slurmrestd API version: %w", lastErr)
}

// do sends one request; it returns the status and body of any answer.
func (c *Client) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != nil {
		tok, err := c.token.read()
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("X-SLURM-USER-TOKEN", tok)
		if c.user != "" {
			req.Header.Set("X-SLURM-USER-NAME", c.user)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("slurmrestd %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("slurmrestd %s %s: %w", method, path, err)
	}
	return resp.StatusCode, raw, nil
}

// call sends a request and turns Slurm's errors into an *APIError; the
// body is returned with it (a submission can carry a job id and errors).
func (c *Client) call(ctx context.Context, op, method, path string, body any) ([]byte, error) {
	status, raw, err := c.do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	var env envelope
	_ = json.Unmarshal(raw, &env)
	if status/100 != 2 || len(env.Errors) > 0 {
		api := &APIError{Op: op, Status: status, Errors: env.Errors}
		if api.has(errInvalidJobID) {
			return raw, fmt.Errorf("%w: %v", ErrJobNotFound, api)
		}
		return raw, api
	}
	return raw, nil
}

// Submit submits a batch job and returns its id. A submission slurmctld
// accepted with a complaint (e.g. "Required node not available": the job
// waits for a node that is down) has a job id and errors: the job exists,
// so it is a success.
func (c *Client) Submit(ctx context.Context, spec JobSpec) (int64, error) {
	raw, callErr := c.call(ctx, "submit job", http.MethodPost, "/slurm/"+c.dialect.Version()+"/job/submit", c.dialect.submitBody(spec))
	if raw == nil {
		return 0, callErr
	}
	var resp struct {
		JobID  int64 `json:"job_id"`
		Result *struct {
			JobID int64 `json:"job_id"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		if callErr != nil {
			return 0, callErr
		}
		return 0, fmt.Errorf("decode job submission: %w", err)
	}
	if resp.JobID == 0 && resp.Result != nil {
		resp.JobID = resp.Result.JobID
	}
	switch {
	case resp.JobID != 0:
		return resp.JobID, nil
	case callErr != nil:
		return 0, callErr
	}
	return 0, errors.New("slurmrestd accepted the job but returned no job id")
}

// Job reads one job; ErrJobNotFound when slurmctld does not know it.
func (c *Client) Job(ctx context.Context, id int64) (Job, error) {
	raw, err := c.call(ctx, "get job", http.MethodGet, c.jobPath(id), nil)
	if err != nil {
		return Job{}, err
	}
	jobs, err := c.dialect.decodeJobs(raw)
	if err != nil {
		return Job{}, err
	}
	for _, j := range jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return Job{}, fmt.Errorf("%w: %d", ErrJobNotFound, id)
}

// Jobs lists every job slurmctld knows: pending, running, and those that
// ended less than MinJobAge ago.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	raw, err := c.call(ctx, "list jobs", http.MethodGet, c.dialect.jobsPath(), nil)
	if err != nil {
		return nil, err
	}
	return c.dialect.decodeJobs(raw)
}

// Cancel cancels a job as scancel does (slurmd sends SIGTERM, waits
// KillWait, then SIGKILL). A job that has ended or is unknown is not an
// error: either way it holds nothing any more.
func (c *Client) Cancel(ctx context.Context, id int64) error {
	return c.signal(ctx, id, "")
}

// Signal sends a signal (e.g. "SIGTERM") to the job's processes without
// cancelling it.
func (c *Client) Signal(ctx context.Context, id int64, signal string) error {
	return c.signal(ctx, id, signal)
}

func (c *Client) signal(ctx context.Context, id int64, signal string) error {
	path := c.jobPath(id)
	if signal != "" {
		path += "?signal=" + url.QueryEscape(signal)
	}
	_, err := c.call(ctx, "cancel job", http.MethodDelete, path, nil)
	var api *APIError
	if errors.Is(err, ErrJobNotFound) || (errors.As(err, &api) && api.has(errAlreadyDone)) {
		return nil
	}
	return err
}

// ErrNotSupported: the REST version cannot express the request.
var ErrNotSupported = errors.New("not supported by this slurmrestd API version")

// EndAtTimeLimit cuts a running job's time limit to nothing: slurmctld
// ends it as TIMEOUT at its next time-limit check (SIGTERM, KillWait,
// SIGKILL). It needs operator rights, and v0.0.40 or later
// (ErrNotSupported on v0.0.38, which reads a limit of 0 as INFINITE).
func (c *Client) EndAtTimeLimit(ctx context.Context, id int64) error {
	body := c.dialect.zeroTimeLimitBody()
	if body == nil {
		return ErrNotSupported
	}
	_, err := c.call(ctx, "update job", http.MethodPost, c.jobPath(id), body)
	return err
}

// Ping checks that slurmrestd answers and reaches slurmctld.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.call(ctx, "ping", http.MethodGet, "/slurm/"+c.dialect.Version()+"/ping", nil)
	return err
}

func (c *Client) jobPath(id int64) string {
	return "/slurm/" + c.dialect.Version() + "/job/" + strconv.FormatInt(id, 10)
}

// tokenFile is a JWT kept in a file that operators rotate.
type tokenFile struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	token   string
}

func (t *tokenFile) read() (string, error) {
	st, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("slurm token file: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && st.ModTime().Equal(t.modTime) && st.Size() == t.size {
		return t.token, nil
	}
	raw, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("slurm token file: %w", err)
	}
	tok := strings.TrimSpace(string(raw))
	// Accept the line `scontrol token` prints: SLURM_JWT=<token>.
	tok = strings.TrimPrefix(tok, "SLURM_JWT=")
	if tok == "" {
		return "", fmt.Errorf("slurm token file %s is empty", t.path)
	}
	t.token, t.modTime, t.size = tok, st.ModTime(), st.Size()
	return tok, nil
}
