package deadletters

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// fake is one service's DeadLetterService holding n dead letters.
type fake struct {
	deadletterv1.UnimplementedDeadLetterServiceServer
	name  string
	n     int
	calls []string
}

func (f *fake) ListDeadLetters(_ context.Context, r *deadletterv1.ListDeadLettersRequest) (*deadletterv1.ListDeadLettersResponse, error) {
	f.calls = append(f.calls, "list "+r.GetService()+" "+r.GetPageToken())
	after, _ := strconv.Atoi(r.GetPageToken())
	out := &deadletterv1.ListDeadLettersResponse{}
	for id := after + 1; id <= f.n && len(out.DeadLetters) < int(r.GetPageSize()); id++ {
		out.DeadLetters = append(out.DeadLetters, &deadletterv1.DeadLetter{Service: f.name, Id: int64(id)})
	}
	if len(out.DeadLetters) == int(r.GetPageSize()) && len(out.DeadLetters) > 0 {
		out.NextPageToken = fmt.Sprint(out.DeadLetters[len(out.DeadLetters)-1].GetId())
	}
	return out, nil
}

func (f *fake) DropDeadLetter(_ context.Context, r *deadletterv1.DropDeadLetterRequest) (*deadletterv1.DropDeadLetterResponse, error) {
	f.calls = append(f.calls, fmt.Sprintf("drop %s %d", r.GetService(), r.GetId()))
	return &deadletterv1.DropDeadLetterResponse{}, nil
}

func serve(t *testing.T, f *fake) Upstream {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	deadletterv1.RegisterDeadLetterServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return Upstream{Name: f.name, Conn: conn}
}

// A listing walks the services in order, page by page across their
// boundaries; retries and drops go to the service named.
func TestListPagesAcrossServices(t *testing.T) {
	sched, cons := &fake{name: "scheduler", n: 3}, &fake{name: "consumers", n: 4}
	s := New(serve(t, sched), serve(t, cons))
	op := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAdmin})
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := s.ListDeadLetters(op, &deadletterv1.ListDeadLettersRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range resp.GetDeadLetters() {
			got = append(got, fmt.Sprintf("%s/%d", d.GetService(), d.GetId()))
		}
		if token = resp.GetNextPageToken(); token == "" || pages > 10 {
			break
		}
	}
	want := "[scheduler/1 scheduler/2 scheduler/3 consumers/1 consumers/2 consumers/3 consumers/4]"
	if fmt.Sprint(got) != want {
		t.Errorf("listed %v, want %s", got, want)
	}
	if _, err := s.DropDeadLetter(op, &deadletterv1.DropDeadLetterRequest{Service: "consumers", Id: 2}); err != nil {
		t.Fatal(err)
	}
	if last := cons.calls[len(cons.calls)-1]; last != "drop consumers 2" {
		t.Errorf("consumers calls = %v", cons.calls)
	}
	only, err := s.ListDeadLetters(op, &deadletterv1.ListDeadLettersRequest{Service: "consumers", PageSize: 10})
	if err != nil || len(only.GetDeadLetters()) != 4 {
		t.Errorf("consumers only = %v, %v", only, err)
	}
	for _, tc := range []struct {
		ctx  context.Context
		req  *deadletterv1.DropDeadLetterRequest
		code codes.Code
	}{
		{authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "t"}), &deadletterv1.DropDeadLetterRequest{Service: "consumers", Id: 1}, codes.PermissionDenied},
		{op, &deadletterv1.DropDeadLetterRequest{Service: "quota", Id: 1}, codes.Unavailable},
		{op, &deadletterv1.DropDeadLetterRequest{Service: "mars", Id: 1}, codes.InvalidArgument},
	} {
		if _, err := s.DropDeadLetter(tc.ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("drop %v: %v, want %s", tc.req, err, tc.code)
		}
	}
	if _, err := s.ListDeadLetters(op, &deadletterv1.ListDeadLettersRequest{PageToken: "9:"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a forged token: %v", err)
	}
}
