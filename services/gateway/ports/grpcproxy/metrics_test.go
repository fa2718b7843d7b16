package grpcproxy

import (
	"testing"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// The method label is a method some service of Taskmesh has, or
// "unknown": names a client makes up never become label values.
func TestMethodLabelIsBounded(t *testing.T) {
	claim := "/" + taskv1.LeaseService_ServiceDesc.ServiceName + "/ClaimTasks"
	for _, tt := range []struct{ in, want string }{
		{claim, claim},
		{claim, claim}, // from the cache
		{"/" + taskv1.LeaseService_ServiceDesc.ServiceName + "/MadeUp", methodUnknown},
		{"/taskmesh.nothing.v1.Service/Call", methodUnknown},
		{"/taskmesh.task.v1.TaskSpec/Name", methodUnknown}, // a message, not a service
		{"no-slash", methodUnknown},
		{"", methodUnknown},
	} {
		if got := methodLabel(tt.in); got != tt.want {
			t.Errorf("methodLabel(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
