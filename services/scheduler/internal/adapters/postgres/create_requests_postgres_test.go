package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// createWith creates one new task id under a tenant's request id through
// store and returns the ids of the tasks the store answers with.
func createWith(t *testing.T, store *postgres.TaskStore, tenant, requestID, id string) ([]string, error) {
	t.Helper()
	return create(t, store, app.NewTasks{Tenant: tenant, RequestID: requestID}, id)
}

// createNamed creates task id under a task file's name (a rerunnable
// request id).
func createNamed(t *testing.T, store *postgres.TaskStore, tenant, name, id string) ([]string, error) {
	t.Helper()
	return create(t, store, app.NewTasks{Tenant: tenant, RequestID: name, Rerunnable: true}, id)
}

func create(t *testing.T, store *postgres.TaskStore, n app.NewTasks, id string) ([]string, error) {
	t.Helper()
	tenant := n.Tenant
	out, err := store.Create(context.Background(), app.NewTasks{Tenant: tenant, RequestID: n.RequestID, Rerunnable: n.Rerunnable, At: apptest.T0,
		Tasks: [][]domain.Record{domain.Submit(apptest.T0, id, tenant, "user", "", "", apptest.Spec(t, id), "")}})
	ids := make([]string, len(out))
	for i, tk := range out {
		ids[i] = tk.ID
	}
	return ids, err
}

// twoReplicas opens two task stores on one database, as two scheduler
// replicas would.
func twoReplicas(t *testing.T, pool *pgxpool.Pool) []*postgres.TaskStore {
	stores := []*postgres.TaskStore{
		postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2}),
		postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2}),
	}
	for _, s := range stores {
		t.Cleanup(s.Close)
	}
	return stores
}

// Many creations with one request id at once, through two stores on one
// database (two replicas): the batches of one store meet the same id, and
// the two stores race to record it. Every caller gets the first create's
// task, and one task exists; distinct request ids sent alongside each make
// their own task.
func TestConcurrentCreatesWithOneRequestIDMakeOneTask(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	stores := twoReplicas(t, pool)
	const rounds, callers = 5, 16
	for round := range rounds {
		shared := fmt.Sprint("shared-", round)
		answers := make([][]string, callers)
		own := make([][]string, callers)
		errs := make([]error, 2*callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(2)
			go func() {
				defer wg.Done()
				answers[i], errs[2*i] = createWith(t, stores[i%2], "acme", shared, fmt.Sprintf("s-%d-%d", round, i))
			}()
			go func() {
				defer wg.Done()
				own[i], errs[2*i+1] = createWith(t, stores[i%2], "acme", fmt.Sprintf("own-%d-%d", round, i),
					fmt.Sprintf("o-%d-%d", round, i))
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for i := range callers {
			if len(answers[i]) != 1 || answers[i][0] != answers[0][0] {
				t.Fatalf("round %d: caller %d got %v, caller 0 got %v: want one task for everyone", round, i, answers[i], answers[0])
			}
			if want := fmt.Sprintf("o-%d-%d", round, i); !slices.Equal(own[i], []string{want}) {
				t.Fatalf("round %d: a create with its own request id got %v, want [%s]", round, own[i], want)
			}
		}
		var tasks, events int
		if err := pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM tasks WHERE id LIKE 's-' || $1 || '-%'),
			(SELECT count(*) FROM events WHERE aggregate_id LIKE 's-' || $1 || '-%')`, fmt.Sprint(round)).Scan(&tasks, &events); err != nil {
			t.Fatal(err)
		}
		if tasks != 1 || events != 1 {
			t.Fatalf("round %d: %d tasks and %d events for one request id, want 1 and 1", round, tasks, events)
		}
	}
}

// Creates under one task file's name race on two stores after its task
// ended: one new task is made, every caller gets it, and the name names
// it.
func TestConcurrentRerunsOfANameMakeOneTask(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	stores := twoReplicas(t, pool)
	ctx := context.Background()
	prev, err := createNamed(t, stores[0], "acme", "train", "run-0")
	if err != nil {
		t.Fatal(err)
	}
	const rounds, callers = 4, 16
	for round := 1; round <= rounds; round++ {
		if _, err := stores[0].Mutate(ctx, prev[0], func(tk domain.Task) ([]domain.Record, error) {
			return tk.Cancel(apptest.T0, "user", "")
		}); err != nil {
			t.Fatal(err)
		}
		answers := make([][]string, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i], errs[i] = createNamed(t, stores[i%2], "acme", "train", fmt.Sprintf("run-%d-%d", round, i))
			}()
		}
		wg.Wait()
		for i := range callers {
			if errs[i] != nil {
				t.Fatalf("round %d: %v", round, errs[i])
			}
			if len(answers[i]) != 1 || answers[i][0] != answers[0][0] || answers[i][0] == prev[0] {
				t.Fatalf("round %d: caller %d got %v, caller 0 got %v, the ended run was %v: want one new task for everyone",
					round, i, answers[i], answers[0], prev)
			}
		}
		var tasks int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE id LIKE 'run-' || $1 || '-%'`, fmt.Sprint(round)).Scan(&tasks); err != nil {
			t.Fatal(err)
		}
		named, err := stores[1].TasksNamed(ctx, "acme", []string{"train"})
		if err != nil {
			t.Fatal(err)
		}
		if tasks != 1 || named["train"] != answers[0][0] {
			t.Fatalf("round %d: %d new tasks, the name names %q; want 1 and %s", round, tasks, named["train"], answers[0][0])
		}
		prev = answers[0]
	}
}

// A request id names the tenant's create only: another tenant's same id
// makes its own task, and asking again answers the task as it is now.
func TestRequestIDsAreTheTenants(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
	t.Cleanup(store.Close)
	first, err := createWith(t, store, "acme", "r", "a-1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := createWith(t, store, "globex", "r", "g-1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first, []string{"a-1"}) || !slices.Equal(other, []string{"g-1"}) {
		t.Fatalf("creates answered %v and %v, want [a-1] and [g-1]", first, other)
	}
	if _, err := store.Mutate(context.Background(), "a-1", func(tk domain.Task) ([]domain.Record, error) {
		return tk.Cancel(apptest.T0, "user", "no longer needed")
	}); err != nil {
		t.Fatal(err)
	}
	again, err := store.Create(context.Background(), app.NewTasks{Tenant: "acme", RequestID: "r", At: apptest.T0,
		Tasks: [][]domain.Record{domain.Submit(apptest.T0, "a-2", "acme", "user", "", "", apptest.Spec(t, "a-2"), "")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != "a-1" || again[0].Status != domain.StatusCancelled {
		t.Fatalf("the repeated create answered %+v, want a-1 as it is now (cancelled)", again)
	}
}

// The batches' read of request ids and their insert run on generic
// plans that read the index, with a few thousand requests recorded and
// analyzed.
func TestCreateRequestsRunOnKeyedPlans(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
	t.Cleanup(store.Close)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO create_requests (tenant_id, request_id, task_ids, created_at)
		SELECT 'tenant-' || (i % 40), 'request-' || i, ARRAY['task-' || i], now() FROM generate_series(1, 20000) i;
		ANALYZE create_requests`); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := createWith(t, store, "acme", fmt.Sprint("keyed-", i), fmt.Sprint("k-", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := createWith(t, store, "acme", fmt.Sprint("keyed-", i), fmt.Sprint("k-again-", i)); err != nil {
			t.Fatal(err)
		}
		// A task file's name whose task ended moves to a new one.
		if _, err := createNamed(t, store, "acme", fmt.Sprint("named-", i), fmt.Sprint("n-", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Mutate(ctx, fmt.Sprint("n-", i), func(tk domain.Task) ([]domain.Record, error) {
			return tk.Cancel(apptest.T0, "user", "")
		}); err != nil {
			t.Fatal(err)
		}
		if again, err := createNamed(t, store, "acme", fmt.Sprint("named-", i), fmt.Sprint("n-again-", i)); err != nil || !slices.Equal(again, []string{fmt.Sprint("n-again-", i)}) {
			t.Fatalf("a rerun answered %v, %v", again, err)
		}
	}
	pgtest.CheckKeyedPlans(t, ctx, pool, "on 20,000 recorded requests", []string{
		"SELECT r.tenant_id, r.request_id, r.task_ids, ARRAY",
		"INSERT INTO create_requests",
		"DELETE FROM create_requests",
	})
}

// A create whose request id another transaction records after the batch
// read it unused (another replica's create, committed while this one's
// insert waited for it) is decided again and answers that create's task;
// its own task is not written.
func TestCreateLosingTheRaceForItsRequestIDAnswersTheWinner(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
	t.Cleanup(store.Close)
	ctx := context.Background()
	if _, err := store.Create(ctx, app.NewTasks{Tenant: "acme", At: apptest.T0,
		Tasks: [][]domain.Record{domain.Submit(apptest.T0, "winner", "acme", "user", "", "", apptest.Spec(t, "winner"), "")}}); err != nil {
		t.Fatal(err)
	}
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, `INSERT INTO create_requests (tenant_id, request_id, task_ids, created_at)
		VALUES ('acme', 'r', ARRAY['winner'], now())`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		ids []string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		ids, err := createWith(t, store, "acme", "r", "loser")
		done <- answer{ids, err}
	}()
	// The store's insert waits for the open transaction's row.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO create_requests%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store's insert of the request id never waited for the open transaction")
		}
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || !slices.Equal(a.ids, []string{"winner"}) {
		t.Fatalf("the create answered %v, %v; want [winner]", a.ids, a.err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks WHERE id = 'loser') + (SELECT count(*) FROM events WHERE aggregate_id = 'loser')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the losing create wrote %d rows of its task", n)
	}
}

// The store's three writers (batched changes, creations with a request
// id, group commits) each run Writers/2 transactions, at least one.
func TestWriterConnsCountsEveryWriter(t *testing.T) {
	for writers, want := range map[int]int{0: 6, 1: 3, 2: 3, 4: 6, 9: 12} {
		if got := postgres.WriterConns(writers); got != want {
			t.Errorf("WriterConns(%d) = %d, want %d", writers, got, want)
		}
	}
}
