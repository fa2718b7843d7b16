package holder

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/leaseconn"
	"github.com/taskmesh/taskmesh/services/executor/internal/leasetest"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
)

// attempt is a backend's record of one attempt, as the backends keep it.
type attempt struct {
	Attempt
	stop chan string
}

func newHolder(t *testing.T, fake *leasetest.Fake, cfg Config) *Holder[*attempt] {
	t.Helper()
	conn, err := leaseconn.Dial(fake.Addr(), leaseconn.StaticToken("token"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if cfg.AgentID == "" {
		cfg.AgentID = "backend-1"
	}
	cfg.MachineID = cfg.AgentID
	if cfg.ClaimWait == 0 {
		cfg.ClaimWait = 200 * time.Millisecond
	}
	cfg.RPCTimeout = 5 * time.Second
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 50 * time.Millisecond
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = 30 * time.Second
	}
	return New(cfg, taskv1.NewLeaseServiceClient(conn), slog.New(slog.DiscardHandler),
		func(a *attempt) chan<- string { return a.stop })
}

// run starts f on h until the test ends.
func run(t *testing.T, h *Holder[*attempt], f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	h.Go(func() { f(ctx) })
	t.Cleanup(func() { cancel(); h.Wait() })
}

// TestClaimLoopFillsFreeSlotsOnly: the loop claims no more than the free
// slots (and MaxClaim), with the configured types and labels, holds what
// accept holds, and claims again only once an attempt is released.
func TestClaimLoopFillsFreeSlotsOnly(t *testing.T) {
	fake := leasetest.Start(t)
	h := newHolder(t, fake, Config{Slots: 3, MaxClaim: 2, Types: []string{"shell"}, Labels: []string{"gpu"}})
	var mu sync.Mutex
	var got []*taskv1.Task
	run(t, h, func(ctx context.Context) {
		h.ClaimLoop(ctx, func(tk *taskv1.Task) {
			if h.Hold(tk.GetAttemptId(), &attempt{Attempt: Attempt{TaskID: tk.GetId(), AttemptID: tk.GetAttemptId()}, stop: make(chan string, 1)}) {
				mu.Lock()
				got = append(got, tk)
				mu.Unlock()
			}
		})
	})
	ids := fake.Add(&taskv1.Task{Type: "shell"}, &taskv1.Task{Type: "shell"}, &taskv1.Task{Type: "shell"},
		&taskv1.Task{Type: "shell"}, &taskv1.Task{Type: "shell"})
	held := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	leasetest.WaitFor(t, 5*time.Second, "three tasks held", func() bool { return held() == 3 })
	// Full: the loop waits for a release, not for the server.
	claims := len(fake.Calls("ClaimTasks"))
	time.Sleep(300 * time.Millisecond)
	if n := len(fake.Calls("ClaimTasks")); n != claims {
		t.Fatalf("claims while every slot was held: %d more", n-claims)
	}
	if h.Free() != 0 || held() != 3 {
		t.Fatalf("free %d, held %d; want 0 and 3", h.Free(), held())
	}
	for _, c := range fake.Calls("ClaimTasks") {
		req := c.Req.(*taskv1.ClaimTasksRequest)
		if req.GetLimit() > 2 || !slices.Equal(req.GetTypes(), []string{"shell"}) || !slices.Equal(req.GetLabels(), []string{"gpu"}) ||
			req.GetAgentId() != "backend-1" || req.GetRequestId() == "" {
			t.Fatalf("claim %v: want limit ≤ 2 (MaxClaim), types [shell], labels [gpu], the agent id and a request id", req)
		}
	}
	mu.Lock()
	first := got[0]
	mu.Unlock()
	h.Release(first.GetAttemptId())
	leasetest.WaitFor(t, 5*time.Second, "a fourth task held after a release", func() bool { return held() == 4 })
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, tk := range got {
		seen[tk.GetId()] = true
	}
	if len(seen) != 4 || !seen[ids[0]] || !seen[ids[3]] {
		t.Fatalf("held tasks %v: want the first four of %v", seen, ids)
	}
}

// TestClaimLoopKeepsItsRequestIDWhileTheFailureMayBeTransient: a claim
// that failed as unavailable is sent again with the same request id (the
// server answers what it leased under it), one refused gets a new one.
func TestClaimLoopKeepsItsRequestIDWhileTheFailureMayBeTransient(t *testing.T) {
	fake := leasetest.Start(t)
	var mu sync.Mutex
	// Unavailable carries no business code: it may pass. 30005 is the
	// server's refusal of the request.
	fails := []error{status.Error(codes.Unavailable, "injected"), rpcerr.New(rpcerr.InvalidArgument, "injected")}
	fake.SetFail(func(method string, _ proto.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if method != "ClaimTasks" || len(fails) == 0 {
			return nil
		}
		err := fails[0]
		fails = fails[1:]
		return err
	})
	h := newHolder(t, fake, Config{Slots: 1})
	held := make(chan string, 1)
	run(t, h, func(ctx context.Context) {
		h.ClaimLoop(ctx, func(tk *taskv1.Task) {
			if h.Hold(tk.GetAttemptId(), &attempt{stop: make(chan string, 1)}) {
				held <- tk.GetId()
			}
		})
	})
	id := fake.Add(&taskv1.Task{Type: "shell"})[0]
	select {
	case got := <-held:
		if got != id {
			t.Fatalf("held %s, want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no task held after the failures")
	}
	calls := fake.Calls("ClaimTasks")
	if len(calls) < 3 {
		t.Fatalf("%d claims, want at least 3", len(calls))
	}
	reqID := func(i int) string { return calls[i].Req.(*taskv1.ClaimTasksRequest).GetRequestId() }
	if reqID(0) != reqID(1) {
		t.Errorf("after Unavailable the request id changed: %s then %s", reqID(0), reqID(1))
	}
	if reqID(1) == reqID(2) {
		t.Errorf("after a refusal the request id %s was sent again", reqID(1))
	}
}

// TestHeartbeatCarriesStopsToTheirAttempts: the heartbeat names the held
// attempts and the free slots, and a stop the server sends reaches its
// attempt's channel (an empty reason reads as cancelled); a stop for an
// attempt not held is dropped.
func TestHeartbeatCarriesStopsToTheirAttempts(t *testing.T) {
	fake := leasetest.Start(t)
	h := newHolder(t, fake, Config{Slots: 4})
	ids := fake.Add(&taskv1.Task{Type: "shell"}, &taskv1.Task{Type: "shell"})
	// Lease both through a claim of the fake; hold only the first.
	client := h.Client()
	resp, err := client.ClaimTasks(context.Background(), &taskv1.ClaimTasksRequest{AgentId: "backend-1", Limit: 2, RequestId: "r1"})
	if err != nil || len(resp.GetTasks()) != 2 {
		t.Fatalf("claim: %v, %d tasks", err, len(resp.GetTasks()))
	}
	a := &attempt{Attempt: Attempt{TaskID: ids[0], AttemptID: fake.Attempt(ids[0])}, stop: make(chan string, 1)}
	if !h.Hold(a.AttemptID, a) {
		t.Fatal("Hold refused a new attempt")
	}
	if h.Hold(a.AttemptID, &attempt{stop: make(chan string, 1)}) {
		t.Fatal("Hold took an attempt held already")
	}
	fake.StopOnHeartbeat(ids[0], "preempted", 5)
	fake.StopOnHeartbeat(ids[1], "cancelled", 5)
	run(t, h, h.HeartbeatLoop)
	select {
	case reason := <-a.stop:
		if reason != "preempted" {
			t.Fatalf("stop reason %q, want preempted", reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stop did not reach its attempt")
	}
	hb := fake.Calls("SendHeartbeat")[0].Req.(*taskv1.SendHeartbeatRequest)
	if !slices.Equal(hb.GetAttemptIds(), []string{a.AttemptID}) || hb.GetFreeSlots() != 3 {
		t.Fatalf("heartbeat %v: want the one held attempt and 3 free slots", hb)
	}
}

// TestLeaseCalls: Start and Renew return the lease's end the server
// gives; Renew of a lost lease answers an error AttemptGone recognises
// (the backends' cue to drop the attempt); Progress cuts its message.
func TestLeaseCalls(t *testing.T) {
	fake := leasetest.Start(t)
	fake.SetLeaseTTL(time.Minute)
	h := newHolder(t, fake, Config{Slots: 1})
	id := fake.Add(&taskv1.Task{Type: "shell"})[0]
	if _, err := h.Client().ClaimTasks(context.Background(), &taskv1.ClaimTasksRequest{AgentId: "backend-1", Limit: 1, RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	a := Attempt{TaskID: id, AttemptID: fake.Attempt(id)}
	ctx := context.Background()
	expires, err := h.Start(ctx, a)
	if err != nil || time.Until(expires) < 50*time.Second {
		t.Fatalf("Start: %v, lease until %v; want about a minute", err, expires)
	}
	if expires, err = h.Renew(ctx, a); err != nil || time.Until(expires) < 50*time.Second {
		t.Fatalf("Renew: %v, lease until %v; want about a minute", err, expires)
	}
	if err := h.Progress(ctx, a, 40, strings.Repeat("é", 3000)); err != nil {
		t.Fatal(err)
	}
	req := fake.Calls("ReportTaskProgress")[0].Req.(*taskv1.ReportTaskProgressRequest)
	if req.GetProgress() != 40 || len(req.GetMessage()) > 4096 || !utf8.ValidString(req.GetMessage()) {
		t.Fatalf("progress %d, message of %d bytes (valid UTF-8: %v); want 40, at most 4096, valid",
			req.GetProgress(), len(req.GetMessage()), utf8.ValidString(req.GetMessage()))
	}
	fake.ExpireLease(id)
	if _, err := h.Renew(ctx, a); !rpcerr.AttemptGone(err) {
		t.Fatalf("Renew of an expired lease: %v, want the attempt gone (30003)", err)
	}
}

// TestCompleteRetriesWhileTheServerIsUnreachable: an outcome is sent again
// until the server answers; a refusal is an answer for good; a context
// that ends first is not.
func TestCompleteRetriesWhileTheServerIsUnreachable(t *testing.T) {
	fake := leasetest.Start(t)
	var mu sync.Mutex
	unavailable := 2
	fake.SetFail(func(method string, _ proto.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if method == "CompleteTask" && unavailable > 0 {
			unavailable--
			return status.Error(codes.Unavailable, "injected")
		}
		return nil
	})
	h := newHolder(t, fake, Config{Slots: 1})
	id := fake.Add(&taskv1.Task{Type: "shell"})[0]
	if _, err := h.Client().ClaimTasks(context.Background(), &taskv1.ClaimTasksRequest{AgentId: "backend-1", Limit: 1, RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	a := Attempt{TaskID: id, AttemptID: fake.Attempt(id)}
	if _, err := h.Start(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if !h.Complete(context.Background(), &taskv1.CompleteTaskRequest{TaskId: id, AttemptId: a.AttemptID, Stdout: "done"}, log) {
		t.Fatal("Complete gave up while the server was reachable again")
	}
	if got := fake.Complete(id); got == nil || got.GetStdout() != "done" || got.GetAgentId() != "backend-1" {
		t.Fatalf("completion %v: want stdout done from backend-1", got)
	}
	if n := len(fake.Calls("CompleteTask")); n != 3 {
		t.Fatalf("%d CompleteTask calls, want 3 (two unavailable, then taken)", n)
	}
	// The attempt is over: a second outcome is refused, and that is an
	// answer too.
	if !h.Complete(context.Background(), &taskv1.CompleteTaskRequest{TaskId: id, AttemptId: a.AttemptID}, log) {
		t.Fatal("a refused outcome was not an answer for good")
	}
	fake.SetFail(func(string, proto.Message) error { return status.Error(codes.Unavailable, "down") })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if h.Complete(ctx, &taskv1.CompleteTaskRequest{TaskId: id, AttemptId: a.AttemptID}, log) {
		t.Fatal("Complete reported an answer while the server stayed unreachable")
	}
}

func TestRenewDelay(t *testing.T) {
	h := New[*attempt](Config{RenewInterval: 30 * time.Second}, nil, slog.New(slog.DiscardHandler), nil)
	cases := []struct {
		name    string
		expires time.Time
		min     time.Duration
		max     time.Duration
	}{
		{"unknown lease: the interval", time.Time{}, 30 * time.Second, 30 * time.Second},
		{"long lease: the interval", time.Now().Add(10 * time.Minute), 30 * time.Second, 30 * time.Second},
		{"short lease: a third of what is left", time.Now().Add(30 * time.Second), 9 * time.Second, 10 * time.Second},
		{"lease ended: the floor", time.Now().Add(-time.Second), 100 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, c := range cases {
		if d := h.RenewDelay(c.expires); d < c.min || d > c.max {
			t.Errorf("%s: %s, want %s–%s", c.name, d, c.min, c.max)
		}
	}
}

// cutOff makes every call to fake fail as an unreachable server's would,
// until the returned function is called.
func cutOff(fake *leasetest.Fake) (restore func()) {
	fake.SetFail(func(string, proto.Message) error { return status.Error(codes.Unavailable, "cut off") })
	return func() { fake.SetFail(nil) }
}

// heldAttempt holds a new attempt of a task of fake's.
func heldAttempt(t *testing.T, h *Holder[*attempt], id string) *attempt {
	t.Helper()
	a := &attempt{Attempt: Attempt{TaskID: id, AttemptID: "attempt-" + id}, stop: make(chan string, 1)}
	if !h.Hold(a.AttemptID, a) {
		t.Fatal("Hold refused a new attempt")
	}
	return a
}

// TestFenceStopsTheAttemptsOnceTheServerStopsAnswering: while the server
// answers the heartbeats, the attempts held run on however long; once it
// stops, each is sent Fenced when the fence has passed since the last
// answered heartbeat was sent, and not before.
func TestFenceStopsTheAttemptsOnceTheServerStopsAnswering(t *testing.T) {
	const fence = 600 * time.Millisecond
	fake := leasetest.Start(t)
	h := newHolder(t, fake, Config{Slots: 4, Fence: fence})
	a := heldAttempt(t, h, "t1")
	run(t, h, h.HeartbeatLoop)
	select {
	case reason := <-a.stop:
		t.Fatalf("stop %q while the server answered every heartbeat", reason)
	case <-time.After(3 * fence):
	}

	restore := cutOff(fake)
	cut := time.Now()
	// The last heartbeat answered was sent before the cut.
	lastAnswered := cut
	if calls := fake.Calls("SendHeartbeat"); len(calls) > 0 {
		lastAnswered = calls[len(calls)-1].At
	}
	select {
	case reason := <-a.stop:
		at := time.Now()
		if reason != Fenced {
			t.Fatalf("stop %q, want %q", reason, Fenced)
		}
		// The fake records a call on arrival, a little after it was sent.
		if early := lastAnswered.Add(fence - 100*time.Millisecond); at.Before(early) {
			t.Fatalf("fenced %s after the cut, before the fence of %s had passed since the last answered heartbeat", at.Sub(cut), fence)
		}
	case <-time.After(fence + 5*time.Second):
		t.Fatalf("no stop %s after the server stopped answering (fence %s)", time.Since(cut), fence)
	}

	// An attempt held while the fence stays passed (a claim sent long
	// before, answered now) is stopped too.
	late := heldAttempt(t, h, "t-late")
	select {
	case reason := <-late.stop:
		if reason != Fenced {
			t.Fatalf("stop %q of an attempt held past the fence, want %q", reason, Fenced)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("an attempt held past the fence was not stopped")
	}
	h.Release(late.AttemptID)

	// Answered again: an attempt held now runs on.
	restore()
	leasetest.WaitFor(t, 5*time.Second, "an answered heartbeat", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return time.Since(h.contact) < fence/2
	})
	h.Release(a.AttemptID)
	b := heldAttempt(t, h, "t2")
	select {
	case reason := <-b.stop:
		t.Fatalf("stop %q of an attempt held after the server answered again", reason)
	case <-time.After(3 * fence):
	}
}

// TestFenceCountsFromTheStartBeforeAnyAnswer: a restarted backend that
// adopts its jobs and never reaches the server stops them a fence after
// its start; what the server last heard from its earlier run was no
// later than that.
func TestFenceCountsFromTheStartBeforeAnyAnswer(t *testing.T) {
	const fence = 500 * time.Millisecond
	fake := leasetest.Start(t)
	cutOff(fake)
	h := newHolder(t, fake, Config{Slots: 4, Fence: fence})
	start := time.Now()
	a := heldAttempt(t, h, "t1")
	run(t, h, h.HeartbeatLoop)
	select {
	case reason := <-a.stop:
		if reason != Fenced {
			t.Fatalf("stop %q, want %q", reason, Fenced)
		}
		if since := time.Since(start); since < fence {
			t.Fatalf("fenced %s after the start, before the fence of %s", since, fence)
		}
	case <-time.After(fence + 5*time.Second):
		t.Fatal("the adopted attempt was not fenced")
	}
	// A failed heartbeat is tried again within a second, not a whole
	// interval later.
	if n := len(fake.Calls("SendHeartbeat")); n < 2 {
		t.Fatalf("%d heartbeats sent while the server did not answer", n)
	}
}

// TestClaimAnswerRenewsTheFence: an answered claim, even an empty long
// poll, is contact as a heartbeat is.
func TestClaimAnswerRenewsTheFence(t *testing.T) {
	const fence = 600 * time.Millisecond
	fake := leasetest.Start(t)
	// Heartbeats fail; claims are answered.
	fake.SetFail(func(method string, _ proto.Message) error {
		if method == "SendHeartbeat" {
			return status.Error(codes.Unavailable, "cut off")
		}
		return nil
	})
	h := newHolder(t, fake, Config{Slots: 4, Fence: fence, ClaimWait: 100 * time.Millisecond})
	a := heldAttempt(t, h, "t1")
	// One run: its cleanup waits for every loop the holder started.
	run(t, h, func(ctx context.Context) {
		h.Go(func() { h.ClaimLoop(ctx, func(*taskv1.Task) {}) })
		h.HeartbeatLoop(ctx)
	})
	select {
	case reason := <-a.stop:
		t.Fatalf("stop %q while the server answered claims", reason)
	case <-time.After(3 * fence):
	}
}

func TestCheckFence(t *testing.T) {
	for _, tt := range []struct {
		heartbeat, fence time.Duration
		ok               bool
	}{
		{5 * time.Second, 12 * time.Second, true},
		{6 * time.Second, 12 * time.Second, true},
		{7 * time.Second, 12 * time.Second, false},
		{time.Minute, 0, true}, // no fence
	} {
		err := Config{HeartbeatInterval: tt.heartbeat, Fence: tt.fence}.CheckFence()
		if (err == nil) != tt.ok {
			t.Errorf("heartbeat %s, fence %s: err %v", tt.heartbeat, tt.fence, err)
		}
	}
}

// TestFenceLeftIsPassedOnOnlyOnceTheServerAnswered: FenceLeft, the fence
// a backend passes on to its attempts' own processes, is 0 before the
// server answered this process (a restart proves nothing about when the
// server last heard from the backend), then what is left of the fence
// since the last answered call, and 0 again once the server stops
// answering for longer than the fence.
func TestFenceLeftIsPassedOnOnlyOnceTheServerAnswered(t *testing.T) {
	const fence = 2 * time.Second
	fake := leasetest.Start(t)
	restore := cutOff(fake)
	h := newHolder(t, fake, Config{Slots: 4, Fence: fence})
	if left := h.FenceLeft(); left != 0 {
		t.Fatalf("FenceLeft %s before any answer, want 0", left)
	}
	run(t, h, h.HeartbeatLoop)
	time.Sleep(300 * time.Millisecond)
	if left := h.FenceLeft(); left != 0 {
		t.Fatalf("FenceLeft %s while no heartbeat was answered, want 0", left)
	}
	restore()
	leasetest.WaitFor(t, 5*time.Second, "an answered heartbeat", func() bool { return h.FenceLeft() > 0 })
	if left := h.FenceLeft(); left > fence {
		t.Fatalf("FenceLeft %s, more than the fence of %s", left, fence)
	}
	cutOff(fake)
	leasetest.WaitFor(t, fence+5*time.Second, "the fence passed", func() bool { return h.FenceLeft() <= 0 })
}
