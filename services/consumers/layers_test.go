package consumers_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// The audit, usage and webhooks contexts' use cases and gRPC ports depend
// on the interfaces their app layers declare; only this entry package
// wires the adapters in.
func TestAppAndPortsDependOnNoAdapter(t *testing.T) {
	archtest.RequireLayers(t, ".")
}
