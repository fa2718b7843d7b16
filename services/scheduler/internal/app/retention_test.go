package app_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
)

// Results older than the retention are deleted by the sweeper (the FS
// store cannot expire them itself), younger ones stay, and a result past
// its retention answers "expired" rather than a link that 404s.
func TestSweeperExpiresResultsWithAnInjectedClock(t *testing.T) {
	clk := clocktest.NewFixed(apptest.T0)
	objects, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: "http://127.0.0.1:1/objects",
		Secret: []byte(strings.Repeat("s", objectstore.MinSecretLen)), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	store := apptest.NewStore()
	a := app.New(store.Stores(), objects, clk.Now, app.NewHub(), app.Config{ResultRetention: 30 * 24 * time.Hour}, nil)
	ctx := context.Background()
	put := func(key string) {
		if _, err := objects.Put(ctx, key, strings.NewReader("{}"), 2, "application/json"); err != nil {
			t.Fatal(err)
		}
	}
	keys := func() []string {
		var out []string
		_ = objects.List(ctx, "", func(i objectstore.Info) error { out = append(out, i.Key); return nil })
		slices.Sort(out)
		return out
	}
	if a.SetUpResultRetention(ctx) {
		t.Fatal("the FS store claims to expire results itself")
	}
	put("results/t1/old/a.json")
	put("video-frames/keep.png") // not a result: never swept here
	clk.Advance(29 * 24 * time.Hour)
	put("results/t1/young/b.json")
	if rep, err := a.Sweep(ctx); err != nil || rep.ResultsExpired != 0 {
		t.Fatalf("sweep at 29 days = %+v, %v; want nothing expired", rep, err)
	}
	clk.Advance(2 * 24 * time.Hour) // old: 31 days, young: 2
	rep, err := a.Sweep(ctx)
	if err != nil || rep.ResultsExpired != 1 {
		t.Fatalf("sweep at 31 days = %+v, %v; want one expired", rep, err)
	}
	if got := keys(); !slices.Equal(got, []string{"results/t1/young/b.json", "video-frames/keep.png"}) {
		t.Errorf("left = %v", got)
	}
	// Sweeping again within the hour does not list the store again.
	clk.Advance(10 * time.Minute)
	put("results/t1/young/c.json")
	if rep, err := a.Sweep(ctx); err != nil || rep.ResultsExpired != 0 {
		t.Errorf("sweep 10 minutes later = %+v, %v", rep, err)
	}
}

func TestResultPastItsRetentionIsExpired(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.ResultRetention = 30 * 24 * time.Hour })
	x := h.create(user("t1"), spec("big"))
	x = h.claimOne("a1", "m1", x.ID)
	up, err := h.app.CreateResultUpload(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, 2, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.objects.Put(h.ctx, up.Key, strings.NewReader("{}"), 2, "application/json"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID,
		Object: &app.ResultObject{Key: up.Key, Size: 2}}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(29 * 24 * time.Hour)
	if r, err := h.app.GetResult(h.ctx, user("t1"), x.ID); err != nil || r.PresignedURL == "" {
		t.Fatalf("result at 29 days = %+v, %v", r, err)
	}
	h.clock.Advance(2 * 24 * time.Hour)
	if _, err := h.app.GetResult(h.ctx, user("t1"), x.ID); !errors.Is(err, app.ErrResultExpired) {
		t.Errorf("result at 31 days: %v, want expired", err)
	}
}
