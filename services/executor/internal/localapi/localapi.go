// Package localapi serves the agent-local API (list, get, create, cancel,
// queue status; docs/api/agent-local.md) as agentv1.AgentLocalServiceServer
// over the journal and the agent, exposed as REST through grpc-gateway.
//
// JSON uses the proto field names (protojson UseProtoNames), every field
// present, a task without an exit code showing "exit_code": null. Errors are the
// task API's envelope {"code":…,"message":…,"data":null} with the business
// code (30004 → 404, 30005 → 400, 30001/30002 → 409, 30003 → 410, else 500),
// mapped in one place: writeError.
package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	agentv1 "github.com/taskmesh/taskmesh/gen/taskmesh/agent/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/domain/textcut"
	"github.com/taskmesh/taskmesh/platform/readonlykeys"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/peercred"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Reader reads the journal.
type Reader interface {
	// Latest returns the newest attempt of a task, or journal.ErrNotFound.
	Latest(ctx context.Context, taskID string) (journal.Task, error)
	// List returns attempts newest first, optionally of one status.
	List(ctx context.Context, status string, limit int) ([]journal.Task, error)
}

// Backend is what the agent does for the API. Its errors are status
// errors carrying business codes (rpcerr.New).
type Backend interface {
	// SubmitWithFence queues a local task, under its creator's fence
	// when fence.Length > 0.
	SubmitWithFence(ctx context.Context, spec *taskv1.TaskSpec, fence Fence) (journal.Task, error)
	// RenewFence moves a fenced local task's fence to d from now and
	// returns the task (30004 unknown, 30005 created without a fence).
	RenewFence(ctx context.Context, id string, d time.Duration) (journal.Task, error)
	// Cancel stops or cancels a task of this agent (30004 unknown, 30002
	// already final).
	Cancel(ctx context.Context, id string, grace *time.Duration) (journal.Task, error)
	// Status summarises slots and queues.
	Status(ctx context.Context) (QueueStatus, error)
}

// Fence is the fence a local task's creator asks for
// (docs/api/agent-local.md, "Fenced local tasks"): Length 0 is none; Grace
// 0 takes the agent's own.
type Fence struct {
	Length, Grace time.Duration
}

// Bounds of the fence parameters, in milliseconds.
const (
	minFenceMS      = 1000
	maxFenceMS      = 3_600_000
	maxFenceGraceMS = 60_000
)

// QueueStatus is the agent's summary for GET /api/v1/queue/status.
type QueueStatus struct {
	AgentID, MachineID string
	Labels             []string
	Slots, Running     int
	Pending, Unsynced  int
	ServerReachable    bool
	LastHeartbeat      time.Time
}

// Server implements agentv1.AgentLocalServiceServer.
type Server struct {
	agentv1.UnimplementedAgentLocalServiceServer
	r Reader
	b Backend
}

// NewServer returns the service.
func NewServer(r Reader, b Backend) *Server { return &Server{r: r, b: b} }

// CreateLocalTask queues a task on this agent only.
func (s *Server) CreateLocalTask(ctx context.Context, req *agentv1.CreateLocalTaskRequest) (*agentv1.CreateLocalTaskResponse, error) {
	var fence Fence
	if req.FenceMs != nil {
		if ms := req.GetFenceMs(); ms < minFenceMS || ms > maxFenceMS {
			return nil, rpcerr.New(rpcerr.InvalidArgument, fmt.Sprintf("fence_ms must be %d to %d", minFenceMS, maxFenceMS))
		}
		fence.Length = time.Duration(req.GetFenceMs()) * time.Millisecond
	}
	if req.FenceGraceMs != nil {
		if req.FenceMs == nil {
			return nil, rpcerr.New(rpcerr.InvalidArgument, "fence_grace_ms needs fence_ms")
		}
		if ms := req.GetFenceGraceMs(); ms < 0 || ms > maxFenceGraceMS {
			return nil, rpcerr.New(rpcerr.InvalidArgument, fmt.Sprintf("fence_grace_ms must be 0 to %d", maxFenceGraceMS))
		}
		fence.Grace = time.Duration(req.GetFenceGraceMs()) * time.Millisecond
	}
	t, err := s.b.SubmitWithFence(ctx, req.GetSpec(), fence)
	if err != nil {
		return nil, err
	}
	return &agentv1.CreateLocalTaskResponse{Task: toProto(t)}, nil
}

// ListLocalTasks lists the journal, newest first.
func (s *Server) ListLocalTasks(ctx context.Context, req *agentv1.ListLocalTasksRequest) (*agentv1.ListLocalTasksResponse, error) {
	if len(req.GetStatus()) > 32 {
		return nil, rpcerr.New(rpcerr.InvalidArgument, "status is longer than 32 characters")
	}
	// A status no task can have is a mistake, refused as the server's task
	// list refuses it, rather than an empty list (docs/api/agent-local.md).
	if st := req.GetStatus(); st != "" && !slices.Contains(statuses(), st) {
		return nil, rpcerr.New(rpcerr.InvalidArgument, fmt.Sprintf("status must be one of %s, not %q", strings.Join(statuses(), ", "), st))
	}
	if req.GetLimit() < 0 || req.GetLimit() > 1000 {
		return nil, rpcerr.New(rpcerr.InvalidArgument, "limit must be between 0 and 1000")
	}
	ts, err := s.r.List(ctx, req.GetStatus(), int(req.GetLimit()))
	if err != nil {
		return nil, rpcerr.New(rpcerr.Internal, err.Error())
	}
	resp := &agentv1.ListLocalTasksResponse{Tasks: make([]*agentv1.LocalTask, 0, len(ts))}
	for _, t := range ts {
		resp.Tasks = append(resp.Tasks, toProto(t))
	}
	return resp, nil
}

// statuses are the task statuses a list may filter by: the task API's.
func statuses() []string {
	var out []string
	for _, st := range lifecycle.Statuses() {
		out = append(out, string(st))
	}
	return out
}

// GetLocalTask returns one journal entry (the task's newest attempt).
func (s *Server) GetLocalTask(ctx context.Context, req *agentv1.GetLocalTaskRequest) (*agentv1.GetLocalTaskResponse, error) {
	if req.GetId() == "" || len(req.GetId()) > 128 {
		return nil, rpcerr.New(rpcerr.InvalidArgument, "id must be 1 to 128 characters")
	}
	t, err := s.r.Latest(ctx, req.GetId())
	if errors.Is(err, journal.ErrNotFound) {
		return nil, rpcerr.New(rpcerr.TaskNotFound, "task "+req.GetId()+" not found")
	}
	if err != nil {
		return nil, rpcerr.New(rpcerr.Internal, err.Error())
	}
	return &agentv1.GetLocalTaskResponse{Task: toProto(t)}, nil
}

// CancelLocalTask stops a task running here, with the request's grace
// when it gives one.
func (s *Server) CancelLocalTask(ctx context.Context, req *agentv1.CancelLocalTaskRequest) (*agentv1.CancelLocalTaskResponse, error) {
	if req.GetId() == "" || len(req.GetId()) > 128 {
		return nil, rpcerr.New(rpcerr.InvalidArgument, "id must be 1 to 128 characters")
	}
	var grace *time.Duration
	if req.GracePeriodSec != nil {
		g := req.GetGracePeriodSec()
		if g < 0 || g > 3600 {
			return nil, rpcerr.New(rpcerr.InvalidArgument, "grace_period_sec must be 0 to 3600")
		}
		d := time.Duration(g) * time.Second
		grace = &d
	}
	t, err := s.b.Cancel(ctx, req.GetId(), grace)
	if err != nil {
		return nil, err
	}
	return &agentv1.CancelLocalTaskResponse{Task: toProto(t)}, nil
}

// RenewLocalTaskFence moves a fenced local task's fence and returns the
// task.
func (s *Server) RenewLocalTaskFence(ctx context.Context, req *agentv1.RenewLocalTaskFenceRequest) (*agentv1.RenewLocalTaskFenceResponse, error) {
	if req.GetId() == "" || len(req.GetId()) > 128 {
		return nil, rpcerr.New(rpcerr.InvalidArgument, "id must be 1 to 128 characters")
	}
	if ms := req.GetFenceMs(); ms < 0 || ms > maxFenceMS {
		return nil, rpcerr.New(rpcerr.InvalidArgument, fmt.Sprintf("fence_ms must be 0 to %d", maxFenceMS))
	}
	t, err := s.b.RenewFence(ctx, req.GetId(), time.Duration(req.GetFenceMs())*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return &agentv1.RenewLocalTaskFenceResponse{Task: toProto(t)}, nil
}

// GetQueueStatus summarises slots, the local queue and sync state.
func (s *Server) GetQueueStatus(ctx context.Context, _ *agentv1.GetQueueStatusRequest) (*agentv1.GetQueueStatusResponse, error) {
	q, err := s.b.Status(ctx)
	if err != nil {
		return nil, err
	}
	return &agentv1.GetQueueStatusResponse{
		AgentId: q.AgentID, MachineId: q.MachineID, Labels: q.Labels,
		Slots: int32(q.Slots), Running: int32(q.Running), Pending: int32(q.Pending),
		Unsynced: int32(q.Unsynced), ServerReachable: q.ServerReachable,
		LastHeartbeatAt: ts(q.LastHeartbeat),
	}, nil
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func toProto(t journal.Task) *agentv1.LocalTask {
	lt := &agentv1.LocalTask{
		Id: t.ID, Name: t.Name, Type: t.Type, Command: t.Command, Args: t.Args,
		Workdir: t.Workdir, Env: t.Env, Timeout: int32(t.Timeout), Priority: int32(t.Priority),
		Status: t.Status, AttemptId: t.AttemptID, AssignedAgentId: t.AssignedAgentID,
		LeaseExpiresAt: ts(t.LeaseExpiresAt), Stdout: t.Stdout, Stderr: t.Stderr,
		ReceivedAt: ts(t.ReceivedAt), AssignedAt: ts(t.AssignedAt), StartedAt: ts(t.StartedAt),
		EndedAt: ts(t.EndedAt), Synced: t.Synced, Origin: t.Origin, Progress: int32(t.Progress),
		LastHeartbeatAt: ts(t.LastHeartbeatAt),
		MaxRetries:      int32(t.MaxRetries), RetryDelay: int32(t.RetryDelaySec), RetryCount: int32(t.RetryCount),
		RetryAt: ts(t.RetryAt), GracePeriodSec: int32(t.GracePeriodSec),
	}
	if t.ExitCode != nil {
		c := int32(*t.ExitCode)
		lt.ExitCode = &c
	}
	// A refused outcome is synced too (there is nothing left to send), so
	// synced alone would show it as accepted.
	if t.LastSyncError != "" && t.Origin == journal.OriginServer {
		lt.SyncNote = &t.LastSyncError
	}
	// null until the task failed or was cancelled, as the local queue's
	// example shows it.
	if t.Error != "" {
		lt.Error = &t.Error
	}
	// A task still waiting in the queue has not been taken by anything: no
	// attempt and no agent yet, as the local queue shows a pending task
	// (docs/api/agent-local.md#localtask). The journal already keys its row
	// by the attempt it will run as.
	if t.Status == journal.StatusPending {
		lt.AttemptId, lt.AssignedAgentId = "", ""
	}
	return lt
}

// Options configure Handler.
type Options struct {
	// RefusedUIDs are the users whose connections the API refuses: the
	// sandbox's user, whose tasks share the machine's loopback but must
	// never see the agent's journal nor act on other tasks
	// (docs/api/agent-local.md, "Who may call it").
	RefusedUIDs []uint32
	// Proc is the proc file system the callers' users are read from (""
	// for /proc).
	Proc string
}

// Handler returns the REST handler for srv.
func Handler(ctx context.Context, srv agentv1.AgentLocalServiceServer, o Options) http.Handler {
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &localJSON{runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{},
		}}),
		runtime.WithErrorHandler(writeError),
		runtime.WithRoutingErrorHandler(routingError),
	)
	// RegisterAgentLocalServiceHandlerServer only fails for a nil mux.
	_ = agentv1.RegisterAgentLocalServiceHandlerServer(ctx, mux, srv)
	return refuseUsers(o, refuseBrowsers(withoutLocalReadOnly(mux)))
}

// refuseUsers answers 403 to a connection made by one of o.RefusedUIDs, as
// the kernel lists the client's socket (peercred). A connection from this
// machine whose user cannot be told (its socket is not listed) is refused
// too: a check that could be dodged would be no check. One from another
// machine (the API served on a network address) has no socket here and
// passes, as it always did.
func refuseUsers(o Options, next http.Handler) http.Handler {
	if len(o.RefusedUIDs) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
		remote, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
		if local == nil || err != nil {
			next.ServeHTTP(w, r) // not TCP: no task's loopback connection
			return
		}
		uid, err := peercred.UID(o.Proc, remote, local)
		switch {
		case errors.Is(err, peercred.ErrNotFound) && !remote.IP.IsLoopback() && !local.IP.Equal(remote.IP):
			next.ServeHTTP(w, r)
			return
		case err != nil:
			writeEnvelope(w, http.StatusForbidden, envelope{Code: rpcerr.InvalidArgument,
				Message: "the caller's user could not be told, and the local API does not answer sandboxed tasks"})
			return
		case slices.Contains(o.RefusedUIDs, uid):
			writeEnvelope(w, http.StatusForbidden, envelope{Code: rpcerr.InvalidArgument,
				Message: fmt.Sprintf("a connection of user %d (the sandbox's) is refused: the local API does not answer sandboxed tasks", uid)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// MaxCreateBody is the largest create body the local API reads: a spec's
// command, args and env are far smaller under the agent's policy.
const MaxCreateBody = 4 << 20

// localReadOnly are the keys of a LocalTask, as the API answers it, that
// a spec does not have (status, attempt_id, the timestamps, exit_code, …).
var localReadOnly = readonlykeys.Between((&agentv1.LocalTask{}).ProtoReflect().Descriptor(), (&taskv1.TaskSpec{}).ProtoReflect().Descriptor())

// withoutLocalReadOnly lets a create body be a task as the journal shows
// it (a row of the design's local queue): the agent's own fields are left
// out before the spec is read. A key of neither message is still refused
// as unknown (30005).
func withoutLocalReadOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/tasks" || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxCreateBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeEnvelope(w, http.StatusRequestEntityTooLarge, envelope{Code: rpcerr.InvalidArgument,
					Message: fmt.Sprintf("request body too large: at most %d bytes", MaxCreateBody)})
				return
			}
			writeEnvelope(w, http.StatusBadRequest, envelope{Code: rpcerr.InvalidArgument, Message: "request body could not be read"})
			return
		}
		body, _ = readonlykeys.Drop(body, localReadOnly)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// refuseBrowsers answers 403 to what a web page could send. The API has
// no credentials: loopback keeps other machines out, but not a page open
// in a browser on this one, which may POST to it across origins (a
// text/plain body needs no preflight) or, with its name rebound to
// 127.0.0.1, read it as its own origin. Browsers mark both: an Origin
// header on every POST, Sec-Fetch-Site on every request, and the page's
// own name as Host. Programs on the machine (curl, scripts) send none of
// these, and name the API on loopback by an address or localhost
// (docs/api/agent-local.md).
func refuseBrowsers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if problem := fromBrowser(r); problem != "" {
			writeEnvelope(w, http.StatusForbidden, envelope{Code: rpcerr.InvalidArgument,
				Message: problem + ": the local API has no credentials and answers programs on this machine only"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// fromBrowser says why r looks sent by a web page, "" when it does not.
func fromBrowser(r *http.Request) string {
	if r.Header.Get("Origin") != "" {
		return "a request with an Origin header (from a web page) is refused"
	}
	// "none": the user typed the address; anything else was a page's doing.
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "none" {
		return "a request a web page made (Sec-Fetch-Site " + site + ") is refused"
	}
	// On loopback only addresses and localhost name the API; a name is a
	// page's that was rebound to 127.0.0.1. An API served on a network
	// address is named by its node's name (the Slurm backend's placement,
	// docs/slurm.md), and whoever reaches it there reaches it anyway.
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if tcp, ok := local.(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		return ""
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host != "" && !strings.EqualFold(host, "localhost") && net.ParseIP(host) == nil {
		return "a request for the host name " + strconv.Quote(textcut.Bytes(host, 64)) + " is refused on loopback (name the API by its address or localhost)"
	}
	return ""
}

// localJSON is protojson with every field present, as JSONPb with
// EmitUnpopulated writes it, except that protojson leaves an unset proto3
// optional field out: a local task without an exit code would have no
// exit_code key. It is written as null, as the task API shows it; and a
// task without an error shows "error": null, as docs/api/agent-local.md
// shows a task that has not failed (exit_code: null, error: null). Every
// optional field of a task is written so.
type localJSON struct{ runtime.JSONPb }

func (m *localJSON) Marshal(v any) ([]byte, error) {
	switch x := v.(type) {
	case *agentv1.LocalTask:
		return m.task(x)
	case *agentv1.ListLocalTasksResponse:
		b := []byte(`{"tasks":[`)
		for i, t := range x.GetTasks() {
			tb, err := m.task(t)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, tb...)
		}
		return append(b, "]}"...), nil
	}
	return m.JSONPb.Marshal(v)
}

// task writes t with every unset optional field as null: "exit_code"
// without an exit code, "error" without an error, "sync_note" without a
// note.
func (m *localJSON) task(t *agentv1.LocalTask) ([]byte, error) {
	b, err := m.JSONPb.Marshal(t)
	if err != nil || t == nil {
		return b, err
	}
	msg := t.ProtoReflect()
	var unset []string
	fds := msg.Descriptor().Fields()
	for i := range fds.Len() {
		if fd := fds.Get(i); fd.HasOptionalKeyword() && !msg.Has(fd) {
			unset = append(unset, string(fd.Name()))
		}
	}
	if len(unset) == 0 {
		return b, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	for _, name := range unset {
		fields[name] = json.RawMessage("null")
	}
	return json.Marshal(fields)
}

// envelope is the task API's error body (docs/api/README.md#the-error-envelope).
type envelope struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data"`
}

// httpStatus maps business codes to HTTP statuses
// (docs/api/agent-local.md#errors).
func httpStatus(code int) int {
	switch code {
	case rpcerr.AttemptMismatch, rpcerr.TaskImmutable:
		return http.StatusConflict
	case rpcerr.LeaseExpired:
		return http.StatusGone
	case rpcerr.TaskNotFound:
		return http.StatusNotFound
	case rpcerr.InvalidArgument:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func writeError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	code := rpcerr.FromGRPC(err)
	writeEnvelope(w, httpStatus(code), envelope{Code: code, Message: rpcerr.Message(err)})
}

func routingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
	switch status {
	case http.StatusNotFound:
		writeEnvelope(w, status, envelope{Code: rpcerr.TaskNotFound, Message: "no route for " + r.URL.Path})
	case http.StatusMethodNotAllowed:
		writeEnvelope(w, status, envelope{Code: rpcerr.InvalidArgument, Message: r.Method + " is not allowed on " + r.URL.Path})
	default:
		writeEnvelope(w, status, envelope{Code: rpcerr.InvalidArgument, Message: http.StatusText(status)})
	}
}

func writeEnvelope(w http.ResponseWriter, status int, e envelope) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}
