package scheduler_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

func TestNewRefusesATooSmallPool(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	_, err := scheduler.New(scheduler.Config{DB: pool})
	if err == nil || !strings.Contains(err.Error(), "needs at least") {
		t.Fatalf("err = %v", err)
	}
	_ = context.Background()
}
