package quota

import "google.golang.org/grpc"

func registerPorts(grpc.ServiceRegistrar, *Service) {}
