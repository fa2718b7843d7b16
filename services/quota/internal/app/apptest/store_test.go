package apptest

import "testing"

func TestStoreKeepsTheContract(t *testing.T) {
	StoreContract(t, func(*testing.T) ContractStore { return NewStore() })
}
