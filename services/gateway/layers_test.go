package gateway_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// The gateway is organised by surface: its ports (ports/rest,
// ports/grpcproxy, ports/admin) over the helpers in internal/. The ports
// are held to the layering every service follows, so an adapter package
// the gateway grows is wired in by this entry package, never imported by
// a port.
func TestPortsDependOnNoAdapter(t *testing.T) {
	archtest.RequireLayers(t, ".")
}
