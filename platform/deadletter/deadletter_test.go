package deadletter_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/deadletter"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/projection"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, "svc", projection.Migrations())
	}))
}

var operator = authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAdmin, Subject: "op"})

func park(t *testing.T, pool *pgxpool.Pool, offset int64) int64 {
	t.Helper()
	var id int64
	err := pg.InTx(context.Background(), pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		d, err := projection.Park(context.Background(), tx, "usage", &kgo.Record{Topic: "t", Partition: 1, Offset: offset,
			Key: []byte("task-\xff"), Value: []byte{1, 2}, Headers: []kgo.RecordHeader{{Key: deadletter.EventTypeHeader, Value: []byte("TaskSucceeded")},
				{Key: projection.EventIDHeader, Value: []byte("ev-1")}}}, errors.New("bad record"), 4)
		id = d.ID
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func code(err error) (codes.Code, int) { return status.Code(err), grpcserver.Code(err) }

func TestServer(t *testing.T) {
	pool := pgtest.New(t).Open(t, "svc")
	s := &deadletter.Server{Service: "consumers", DB: pool, Wait: 200 * time.Millisecond, Log: slog.New(slog.DiscardHandler)}
	first, second := park(t, pool, 10), park(t, pool, 11)

	resp, err := s.ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{PageSize: 1})
	if err != nil || len(resp.GetDeadLetters()) != 1 || resp.GetNextPageToken() == "" {
		t.Fatalf("first page = %v, %v", resp, err)
	}
	d := resp.GetDeadLetters()[0]
	if d.GetId() != first || d.GetService() != "consumers" || d.GetEventType() != "TaskSucceeded" || d.GetEventId() != "ev-1" ||
		d.GetKey() != "task-\uFFFD" || d.GetAttempts() != 4 || d.GetError() != "bad record" || d.GetOffset() != 10 {
		t.Errorf("dead letter = %v", d)
	}
	resp, err = s.ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{PageSize: 1, PageToken: resp.GetNextPageToken()})
	if err != nil || len(resp.GetDeadLetters()) != 1 || resp.GetDeadLetters()[0].GetId() != second {
		t.Fatalf("second page = %v, %v", resp, err)
	}

	tenant := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "a"})
	if _, err := s.ListDeadLetters(tenant, &deadletterv1.ListDeadLettersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a tenant listed dead letters: %v", err)
	}
	if _, err := s.DropDeadLetter(operator, &deadletterv1.DropDeadLetterRequest{Service: "scheduler", Id: first}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("another service's id: %v", err)
	}
	if _, err := s.ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{PageToken: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad page token: %v", err)
	}

	// No consumer runs: the retry stays pending.
	r, err := s.RetryDeadLetter(operator, &deadletterv1.RetryDeadLetterRequest{Service: "consumers", Id: first})
	if err != nil || r.GetOutcome() != "pending" || r.GetDeadLetter().GetRetryRequestedAt() == nil {
		t.Fatalf("retry without a consumer = %v, %v", r, err)
	}
	// A consumer that applies it once the second request below is made
	// (applying the first one would leave the second nothing to find).
	firstRequested := r.GetDeadLetter().GetRetryRequestedAt().AsTime()
	done := make(chan error, 1)
	go func() {
		for {
			var at time.Time
			if err := pool.QueryRow(context.Background(), `SELECT retry_requested_at FROM projection_dead_letters WHERE id = $1`, first).Scan(&at); err != nil {
				done <- err
				return
			}
			if !at.After(firstRequested) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			n, err := projection.RetryRequested(context.Background(), pool, "usage",
				func(context.Context, pgx.Tx, projection.DeadLetter) error { return nil }, slog.New(slog.DiscardHandler))
			if err != nil || n > 0 {
				done <- err
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	s.Wait = 10 * time.Second
	r, err = s.RetryDeadLetter(operator, &deadletterv1.RetryDeadLetterRequest{Service: "consumers", Id: first})
	if err != nil || r.GetOutcome() != "applied" || r.GetDeadLetter() != nil {
		t.Fatalf("retry with a consumer = %v, %v", r, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if _, err := s.DropDeadLetter(operator, &deadletterv1.DropDeadLetterRequest{Service: "consumers", Id: second}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		func() error {
			_, err := s.DropDeadLetter(operator, &deadletterv1.DropDeadLetterRequest{Service: "consumers", Id: second})
			return err
		}(),
		func() error {
			_, err := s.RetryDeadLetter(operator, &deadletterv1.RetryDeadLetterRequest{Service: "consumers", Id: first})
			return err
		}(),
	} {
		if c, n := code(err); c != codes.NotFound || n != 33004 {
			t.Errorf("gone dead letter: %v (code %d)", err, n)
		}
	}
}
