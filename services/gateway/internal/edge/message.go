package edge

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/taskmesh/taskmesh/platform/grpcserver"
)

// inputTypes caches each method's request type; a nil entry means the
// method is not in the registry (the front door forwards it unchecked and
// the service answers Unimplemented).
var inputTypes sync.Map // full method → protoreflect.MessageType (or nil)

// inputType finds the request type of "/pkg.Service/Method".
func inputType(fullMethod string) protoreflect.MessageType {
	if v, ok := inputTypes.Load(fullMethod); ok {
		mt, _ := v.(protoreflect.MessageType)
		return mt
	}
	var mt protoreflect.MessageType
	svc, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if ok {
		if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc)); err == nil {
			if sd, ok := d.(protoreflect.ServiceDescriptor); ok {
				if md := sd.Methods().ByName(protoreflect.Name(method)); md != nil {
					mt, _ = protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
				}
			}
		}
	}
	inputTypes.Store(fullMethod, mt)
	return mt
}

// CheckFrame decodes a request message of fullMethod from its wire form
// and checks every string in it (CheckMessage). Decoding refuses invalid
// UTF-8 in proto3 strings; both refusals are InvalidArgument statuses.
// A method the registry does not know passes unchecked.
func CheckFrame(fullMethod string, payload []byte) error {
	mt := inputType(fullMethod)
	if mt == nil {
		return nil
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(payload, m); err != nil {
		return refusal("", fmt.Sprintf("malformed request message: %v", err))
	}
	return CheckMessage(m)
}

// CheckMessage refuses a message any of whose strings (fields, repeated
// items, map keys and values, nested messages) contains NUL or is not
// valid UTF-8, with an InvalidArgument status naming the field.
func CheckMessage(m proto.Message) error {
	if path, msg := badStrings(m.ProtoReflect(), ""); msg != "" {
		return refusal(path, fmt.Sprintf("field %s %s", path, msg))
	}
	return nil
}

// refusal is the answer to a bad request message: InvalidArgument carrying
// the business code 30005 (INVALID_ARGUMENT) like every other refused
// request, and the field as a violation when one is named, so a caller
// tells it from a transient failure and does not send it again.
func refusal(field, msg string) error {
	var fields []*errdetails.BadRequest_FieldViolation
	if field != "" {
		fields = append(fields, &errdetails.BadRequest_FieldViolation{Field: field, Description: msg})
	}
	return grpcserver.Status(codes.InvalidArgument, grpcserver.CodeInvalidArgument, "INVALID_ARGUMENT", msg, fields...)
}

func badStrings(m protoreflect.Message, prefix string) (string, string) {
	var path, msg string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind {
					if msg = badText(k.String()); msg != "" {
						path = name + " (a key)"
						return false
					}
				}
				path, msg = badValue(fd.MapValue(), mv, fmt.Sprintf("%s[%q]", name, k.String()))
				return msg == ""
			})
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if path, msg = badValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", name, i)); msg != "" {
					break
				}
			}
		default:
			path, msg = badValue(fd, v, name)
		}
		return msg == ""
	})
	return path, msg
}

func badValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) (string, string) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		s := v.String()
		if !utf8.ValidString(s) {
			return path, "is not valid UTF-8"
		}
		if strings.IndexByte(s, 0) >= 0 {
			return path, "contains a NUL character"
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return badStrings(v.Message(), path+".")
	}
	return "", ""
}
