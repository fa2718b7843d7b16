package grpcproxy

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// reflectionMethods prefixes both versions of the reflection service.
const reflectionMethods = "/grpc.reflection."

// services lists the public services for reflection. The front door
// forwards methods it does not know, so grpc's own list (the services
// registered on the server) would show only health.
type services []string

func (s services) GetServiceInfo() map[string]grpc.ServiceInfo {
	out := make(map[string]grpc.ServiceInfo, len(s))
	for _, name := range s {
		out[name] = grpc.ServiceInfo{}
	}
	return out
}

// registerReflection serves grpc.reflection v1 and v1alpha (grpcurl asks
// for either) listing names and describing them from the descriptors
// compiled into the gateway, so `grpcurl … list` and `describe` need no
// protoset. Callers must be authenticated (streamLocal).
func registerReflection(srv *grpc.Server, names []string) {
	opts := reflection.ServerOptions{Services: services(names), DescriptorResolver: protoregistry.GlobalFiles,
		ExtensionResolver: protoregistry.GlobalTypes}
	v1reflectiongrpc.RegisterServerReflectionServer(srv, reflection.NewServerV1(opts))
	v1alphareflectiongrpc.RegisterServerReflectionServer(srv, reflection.NewServer(opts))
}
