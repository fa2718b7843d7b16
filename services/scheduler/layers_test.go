package scheduler_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// The use cases and the gRPC ports depend on the interfaces the app layer
// declares; only this entry package wires the adapters in.
func TestAppAndPortsDependOnNoAdapter(t *testing.T) {
	archtest.RequireLayers(t, ".")
}
