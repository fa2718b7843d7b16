package executor_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// The executor is organised by component rather than by layer (see
// docs/executor.md#how-the-code-is-organised). Its decisions about what
// may run live in internal/policy, which stays pure so the agent can ask
// it before any I/O; any app, ports or domain package the executor grows
// is held to the layering every service follows.
func TestPolicyIsPureAndLayersHold(t *testing.T) {
	archtest.RequirePure(t, ".", "internal/policy")
	archtest.RequireLayers(t, ".")
}
