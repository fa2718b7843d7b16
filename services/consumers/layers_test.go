package consumers_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// The use cases and the gRPC ports of every context depend on the
// interfaces their app layer declares; only this entry package wires the
// adapters in.
func TestAppAndPortsDependOnNoAdapter(t *testing.T) {
	archtest.RequireLayers(t, ".")
}
