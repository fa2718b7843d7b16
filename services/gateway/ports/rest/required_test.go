package rest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// recordingServers answers the routes of requiredBodyFields and records
// what reached them.
type recordingServers struct {
	webhookv1.UnimplementedWebhookServiceServer
	quotav1.UnimplementedQuotaServiceServer
	mu    sync.Mutex
	calls []string
}

func (s *recordingServers) record(call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
}

func (s *recordingServers) taken() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.calls
	s.calls = nil
	return out
}

func (s *recordingServers) SetWebhookEndpoint(_ context.Context, r *webhookv1.SetWebhookEndpointRequest) (*webhookv1.SetWebhookEndpointResponse, error) {
	s.record("url=" + r.GetUrl())
	return &webhookv1.SetWebhookEndpointResponse{Endpoint: &webhookv1.WebhookEndpoint{Url: r.GetUrl()}}, nil
}

func (s *recordingServers) GetWebhookEndpoint(context.Context, *webhookv1.GetWebhookEndpointRequest) (*webhookv1.GetWebhookEndpointResponse, error) {
	s.record("get")
	return &webhookv1.GetWebhookEndpointResponse{}, nil
}

func (s *recordingServers) SetInventory(_ context.Context, r *quotav1.SetInventoryRequest) (*quotav1.SetInventoryResponse, error) {
	s.record(fmt.Sprintf("total_gpus=%d", r.GetTotalGpus()))
	return &quotav1.SetInventoryResponse{}, nil
}

// A PUT whose left-out field would read as the destructive "" or 0 is
// refused before the service is called; the value sent on purpose, under
// either of its names, goes through.
func TestRoutesRefuseABodyWithoutTheirRequiredFields(t *testing.T) {
	srv := &recordingServers{}
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
		runtime.WithMiddlewares(recordRoute, requireBodyFields))
	if err := webhookv1.RegisterWebhookServiceHandlerServer(context.Background(), mux, srv); err != nil {
		t.Fatal(err)
	}
	if err := quotav1.RegisterQuotaServiceHandlerServer(context.Background(), mux, srv); err != nil {
		t.Fatal(err)
	}
	const endpoint, inventory = "/api/v1/webhook-endpoint", "/api/v1/clusters/c1/inventory/A100"
	tests := []struct {
		name, method, path string
		body               *string // nil: no body at all
		wantStatus         int
		wantMessage        string // in a refusal's body
		wantCall           string // "" = the service is not called
	}{
		{"no body", "PUT", endpoint, nil, 400, "url: required", ""},
		{"an empty body", "PUT", endpoint, ptr(""), 400, "url: required", ""},
		{"an empty object", "PUT", endpoint, ptr("{}"), 400, "url: required", ""},
		{"the endpoint removed on purpose", "PUT", endpoint, ptr(`{"url": ""}`), 200, "", "url="},
		{"an endpoint set", "PUT", endpoint, ptr(`{"url": "https://example.com/hook"}`), 200, "", "url=https://example.com/hook"},
		{"not an object: the route's decoder refuses it", "PUT", endpoint, ptr(`[1]`), 400, "", ""},
		{"a route without required fields", "GET", endpoint, nil, 200, "", "get"},
		{"an inventory without its count", "PUT", inventory, ptr(`{}`), 400, "total_gpus: required", ""},
		{"an inventory emptied on purpose", "PUT", inventory, ptr(`{"total_gpus": 0}`), 200, "", "total_gpus=0"},
		{"the JSON name", "PUT", inventory, ptr(`{"totalGpus": 4}`), 200, "", "total_gpus=4"},
		// An operator's route: who calls is judged first, by the service,
		// which refuses a tenant's call whatever its body (403).
		{"a tenant's inventory without its count", "PUT", inventory, ptr(`{}`), 200, "", "total_gpus=0"},
	}
	for _, tt := range tests {
		var body io.Reader
		if tt.body != nil {
			body = strings.NewReader(*tt.body)
		}
		req := httptest.NewRequest(tt.method, tt.path, body)
		req.Header.Set("Content-Type", "application/json")
		kind := authn.KindAdmin
		if strings.HasPrefix(tt.name, "a tenant's") {
			kind = authn.KindUser
		}
		req = req.WithContext(authn.NewContext(req.Context(), authn.Principal{Kind: kind, TenantID: "acme"}))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != tt.wantStatus {
			t.Errorf("%s: status %d, want %d (%s)", tt.name, rec.Code, tt.wantStatus, rec.Body)
		}
		if tt.wantMessage != "" {
			var env struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Code != 30005 || !strings.Contains(env.Message, tt.wantMessage) {
				t.Errorf("%s: body %s, want code 30005 and a message with %q", tt.name, rec.Body, tt.wantMessage)
			}
		}
		calls := srv.taken()
		switch {
		case tt.wantCall == "" && len(calls) != 0:
			t.Errorf("%s: the service was called: %v", tt.name, calls)
		case tt.wantCall != "" && (len(calls) != 1 || calls[0] != tt.wantCall):
			t.Errorf("%s: calls %v, want [%s]", tt.name, calls, tt.wantCall)
		}
	}
}

func ptr(s string) *string { return &s }
