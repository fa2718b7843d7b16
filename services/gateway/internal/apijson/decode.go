package apijson

import (
	"io"
	"reflect"
	"regexp"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// NewDecoder is JSONPb's, except that a wrongly typed value is reported
// under the key the API spells. protojson names the field by its JSON
// name ("invalid value for int32 field retryDelay"), which for the
// snake_case keys of the API (docs/api/README.md#json) is a spelling no
// client sent; the message names the field as the request did
// ("retry_delay"). A field whose proto gives it its own json_name (the
// video API's) is already named by its key.
func (m *Marshaler) NewDecoder(r io.Reader) runtime.Decoder {
	d := m.JSONPb.NewDecoder(r)
	return runtime.DecoderFunc(func(v any) error {
		err := d.Decode(v)
		if err == nil {
			return nil
		}
		desc := descriptorOf(v)
		if desc == nil {
			return err
		}
		if msg, renamed := protoNames(err.Error(), desc); renamed {
			return &decodeError{msg: msg, err: err}
		}
		return err
	})
}

// descriptorOf is the message type v decodes into: a message, or (as the
// generated handlers pass a request's body field) a pointer to a message
// pointer; nil for anything else.
func descriptorOf(v any) protoreflect.MessageDescriptor {
	if pm, ok := v.(proto.Message); ok {
		return pm.ProtoReflect().Descriptor()
	}
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Pointer {
		return nil
	}
	if pm, ok := reflect.New(t.Elem().Elem()).Interface().(proto.Message); ok {
		return pm.ProtoReflect().Descriptor()
	}
	return nil
}

// decodeError is a decoding error with the field named as the API spells
// it; it unwraps to protojson's.
type decodeError struct {
	msg string
	err error
}

func (e *decodeError) Error() string { return e.msg }
func (e *decodeError) Unwrap() error { return e.err }

var invalidValue = regexp.MustCompile(`(invalid value for \S+ field )([A-Za-z0-9_]+):`)

// protoNames rewrites the field of protojson's "invalid value for <kind>
// field <json name>:" to its proto name when some message reachable from
// desc has a field of that default JSON name.
func protoNames(msg string, desc protoreflect.MessageDescriptor) (string, bool) {
	loc := invalidValue.FindStringSubmatchIndex(msg)
	if loc == nil {
		return msg, false
	}
	jsonName := msg[loc[4]:loc[5]]
	name, ok := fieldByJSONName(desc, jsonName, map[protoreflect.FullName]bool{})
	if !ok || name == jsonName {
		return msg, false
	}
	var b strings.Builder
	b.WriteString(msg[:loc[4]])
	b.WriteString(name)
	b.WriteString(msg[loc[5]:])
	return b.String(), true
}

func fieldByJSONName(desc protoreflect.MessageDescriptor, jsonName string, seen map[protoreflect.FullName]bool) (string, bool) {
	if seen[desc.FullName()] {
		return "", false
	}
	seen[desc.FullName()] = true
	fields := desc.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.JSONName() == jsonName && jsonName == camelCase(string(fd.Name())) {
			return string(fd.Name()), true
		}
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Message() != nil {
			if name, ok := fieldByJSONName(fd.Message(), jsonName, seen); ok {
				return name, true
			}
		}
	}
	return "", false
}

// camelCase is protobuf's default JSON name of a field name: without its
// underscores, each letter after one in upper case. A field whose JSON
// name is another was given one with json_name on purpose.
func camelCase(name string) string {
	var b strings.Builder
	upper := false
	for i := range len(name) {
		c := name[i]
		switch {
		case c == '_':
			upper = true
			continue
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		}
		upper = false
		b.WriteByte(c)
	}
	return b.String()
}
