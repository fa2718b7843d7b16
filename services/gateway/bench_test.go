package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

// benchGateway runs a gateway in front of a stand-in scheduler that answers
// at once, with a tenant whose limits a benchmark never reaches (the
// limiter still runs on every request), and returns an API key of it.
func benchGateway(b *testing.B, local bool) (*gateway.Gateway, *schedulertest.Fake, string) {
	db := pgtest.New(b).Open(b, schema)
	fake := schedulertest.Start(b, internalToken)
	fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	fake.Respond("CreateTask", &taskv1.CreateTaskResponse{Task: claimedTask()})
	cfg := gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: fake.Addr,
		InternalToken: internalToken, DB: db, Logger: slog.New(slog.DiscardHandler)}
	if local {
		cfg.SchedulerLocal = fake.Local
	}
	ctx, cancel := context.WithCancel(context.Background())
	gw, err := gateway.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = gw.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	if _, err := gw.Credentials().AddTenant(ctx, gateway.TenantSpec{ID: "acme", Name: "Acme", Tier: gateway.TierPremium,
		Limits: gateway.Limits{RPM: gateway.MaxLimit, TPM: gateway.MaxLimit}}); err != nil {
		b.Fatal(err)
	}
	_, secret, err := gw.Credentials().CreateAPIKey(ctx, "acme", "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	return gw, fake, secret
}

// cpuTime is the CPU time this process has used.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// runParallel runs op from 16 goroutines and reports the process's CPU
// time per operation beside the wall time, which on a shared machine
// says more.
func runParallel(b *testing.B, op func() error) {
	b.ReportAllocs()
	b.SetParallelism(8)
	start := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRESTGetTask measures the gateway's own cost per REST call,
// without the network: authentication (cached), rate limits, routing,
// JSON encoding and the gRPC hop to a scheduler that answers at once.
func BenchmarkRESTGetTask(b *testing.B) {
	gw, _, secret := benchGateway(b, false)
	h := gw.HTTPHandler()
	runParallel(b, func() error {
		req := httptest.NewRequest("GET", "/api/v1/tasks/task-001", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return &httpError{status: rec.Code, body: rec.Body.String()}
		}
		return nil
	})
}

// BenchmarkSubmitGet is `taskmesh bench gateway`'s operation (submit a
// task, then get it) against a scheduler that answers at once, so that
// only the paths' own costs count: REST over HTTP/1.1 through a gateway
// reaching the scheduler over gRPC or in-process, and gRPC straight to it.
func BenchmarkSubmitGet(b *testing.B) {
	for _, local := range []bool{false, true} {
		name := "REST/network"
		if local {
			name = "REST/in-process"
		}
		b.Run(name, func(b *testing.B) {
			gw, _, secret := benchGateway(b, local)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			defer client.CloseIdleConnections()
			base := "http://" + gw.HTTPAddr()
			body := []byte(`{"name":"noop","command":"true"}`)
			runParallel(b, func() error {
				var created struct {
					ID string `json:"id"`
				}
				if err := restCall(client, "POST", base+"/api/v1/tasks", secret, body, &created); err != nil {
					return err
				}
				return restCall(client, "GET", base+"/api/v1/tasks/"+created.ID, secret, nil, nil)
			})
		})
	}
	b.Run("gRPC", func(b *testing.B) {
		_, fake, _ := benchGateway(b, false)
		conn, err := grpc.NewClient(fake.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		tasks := taskv1.NewTaskServiceClient(conn)
		runParallel(b, func() error {
			ctx := authn.Outgoing(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: "bench"}, internalToken)
			created, err := tasks.CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "noop", Command: "true"}})
			if err != nil {
				return err
			}
			_, err = tasks.GetTask(ctx, &taskv1.GetTaskRequest{Id: created.GetTask().GetId()})
			return err
		})
	})
}

func restCall(client *http.Client, method, url, secret string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &httpError{status: resp.StatusCode, body: string(data)}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return http.StatusText(e.status) + ": " + e.body }
