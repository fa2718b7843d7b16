package gateway_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

// BenchmarkRESTGetTask measures the gateway's own cost per REST call:
// authentication (one indexed Postgres lookup), routing, JSON encoding and
// the gRPC hop to a scheduler that answers at once.
func BenchmarkRESTGetTask(b *testing.B) {
	db := pgtest.New(b).Open(b, schema)
	fake := schedulertest.Start(b, internalToken)
	fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	gw, err := gateway.New(context.Background(), gateway.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: fake.Addr,
		InternalToken: internalToken, DB: db, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Close() })
	ctx := context.Background()
	if _, err := gw.Credentials().CreateTenant(ctx, "acme", "Acme", gateway.TierPremium); err != nil {
		b.Fatal(err)
	}
	_, secret, err := gw.Credentials().CreateAPIKey(ctx, "acme", "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	h := gw.HTTPHandler()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest("GET", "/api/v1/tasks/task-001", nil)
			req.Header.Set("Authorization", "Bearer "+secret)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	})
}
