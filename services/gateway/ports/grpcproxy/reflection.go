package grpcproxy

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protoreflect"
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

// publicFiles resolves descriptors from the files of the listed services
// and the files they import, and nothing else: the registry compiled into
// the gateway also holds internal services (the scheduler's agent fleet,
// the agents' local API), which the list leaves out and describe must not
// show either.
type publicFiles map[string]bool // file path → public

func newPublicFiles(services []string) publicFiles {
	files := publicFiles{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if files[fd.Path()] {
			return
		}
		files[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
	}
	for _, name := range services {
		if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name)); err == nil {
			add(d.ParentFile())
		}
	}
	return files
}

func (f publicFiles) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if !f[path] {
		return nil, protoregistry.NotFound
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (f publicFiles) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return nil, err
	}
	if !f[d.ParentFile().Path()] {
		return nil, protoregistry.NotFound
	}
	return d, nil
}

// registerReflection serves grpc.reflection v1 and v1alpha (grpcurl asks
// for either) listing names and describing them from the descriptors
// compiled into the gateway (publicFiles), so `grpcurl … list` and
// `describe` need no protoset. Callers must be authenticated (streamLocal).
func registerReflection(srv *grpc.Server, names []string) {
	opts := reflection.ServerOptions{Services: services(names), DescriptorResolver: newPublicFiles(names),
		ExtensionResolver: protoregistry.GlobalTypes}
	v1reflectiongrpc.RegisterServerReflectionServer(srv, reflection.NewServerV1(opts))
	v1alphareflectiongrpc.RegisterServerReflectionServer(srv, reflection.NewServer(opts))
}
