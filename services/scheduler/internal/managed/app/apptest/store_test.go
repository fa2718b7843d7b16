package apptest

import (
	"testing"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
)

func TestFakeStoreKeepsTheContract(t *testing.T) {
	StoreContract(t, func(*testing.T) app.Store { return NewStore() })
}
