package quota

import (
	"google.golang.org/grpc"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/services/quota/internal/ports"
)

func registerPorts(g grpc.ServiceRegistrar, s *Service) {
	quotav1.RegisterQuotaServiceServer(g, &ports.QuotaServer{App: s.app, Log: s.log})
}
