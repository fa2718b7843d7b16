package edge

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

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
// UTF-8 in proto3 strings, without naming the field: the wire is then
// walked to name it. Every refusal is an InvalidArgument status, with
// the field as a violation when one is found.
// A method the registry does not know passes unchecked.
func CheckFrame(fullMethod string, payload []byte) error {
	mt := inputType(fullMethod)
	if mt == nil {
		return nil
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(payload, m); err != nil {
		// protobuf's error does not say which field held the bad bytes;
		// find it on the wire so the answer names it as for NUL.
		if path := invalidUTF8(mt.Descriptor(), payload, ""); path != "" {
			return refusal(path, fmt.Sprintf("field %s is not valid UTF-8", path))
		}
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

// invalidUTF8 walks b, a message of md in its wire form, and returns the
// path of the first string (a field, a repeated item, a map key or value,
// at any depth) that is not valid UTF-8, spelt as badStrings spells it;
// "" if there is none or the wire is malformed before one is reached.
func invalidUTF8(md protoreflect.MessageDescriptor, b []byte, prefix string) string {
	items := map[protowire.Number]int{} // occurrences so far: a repeated item's index
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType {
			// Strings, messages and map entries are all length-delimited;
			// anything else (packed scalars included) holds no text.
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		path := prefix + string(fd.Name())
		if fd.IsList() {
			path = fmt.Sprintf("%s[%d]", path, items[num])
			items[num]++
		}
		var bad string
		switch {
		case fd.IsMap():
			bad = invalidUTF8Entry(fd, v, path)
		case fd.Kind() == protoreflect.StringKind:
			if !utf8.Valid(v) {
				bad = path
			}
		case fd.Kind() == protoreflect.MessageKind:
			bad = invalidUTF8(fd.Message(), v, path+".")
		}
		if bad != "" {
			return bad
		}
	}
	return ""
}

// invalidUTF8Entry checks one map entry (key field 1, value field 2) of
// the map field fd, named name.
func invalidUTF8Entry(fd protoreflect.FieldDescriptor, b []byte, name string) string {
	var keyField, value []byte // the key's whole field (tag included), the value's bytes
	hasValue := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		field := b
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return ""
		}
		switch {
		case num == 1:
			keyField = field[:len(field)-len(b)+n]
		case num == 2 && typ == protowire.BytesType:
			value, _ = protowire.ConsumeBytes(b)
			hasValue = true
		}
		b = b[n:]
	}
	key := dynamicpb.NewMessage(fd.Message())
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(keyField, key); err != nil {
		if fd.MapKey().Kind() == protoreflect.StringKind {
			return name + " (a key)"
		}
		return ""
	}
	if !hasValue {
		return ""
	}
	path := fmt.Sprintf("%s[%q]", name, key.Get(fd.MapKey()).MapKey().String())
	switch fd.MapValue().Kind() {
	case protoreflect.StringKind:
		if !utf8.Valid(value) {
			return path
		}
	case protoreflect.MessageKind:
		return invalidUTF8(fd.MapValue().Message(), value, path+".")
	}
	return ""
}
