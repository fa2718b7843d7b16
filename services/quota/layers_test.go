package quota_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// The use cases and the gRPC ports of the quota service and of its
// admission layer depend on the interfaces their app layers declare; only
// the entry packages wire the adapters in.
func TestAppAndPortsDependOnNoAdapter(t *testing.T) {
	archtest.RequireLayers(t, ".")
}
