package apptest_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
)

// The fake passes the contract the Postgres store passes, so app tests
// written against it hold for the real store.
func TestFakeKeepsTheStoreContract(t *testing.T) {
	apptest.StoreContract(t, func(*testing.T) apptest.Subject {
		return apptest.Subject{Stores: apptest.NewStore().Stores()}
	})
}
