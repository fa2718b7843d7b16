package apijson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

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
// video API's) is already named by its key. A map's value is named by its
// map and key (`env["A"]`), where protojson says only "value".
//
// With StrictIntegers, a string in an integer field is refused first,
// named by its path in the body: `parameters.seed: must be an integer,
// not the string "10"`; with StrictInt32, a string in a 32-bit one.
func (m *Marshaler) NewDecoder(r io.Reader) runtime.Decoder {
	if !m.StrictIntegers && !m.StrictInt32 {
		return m.newDecoder(r)
	}
	var inner runtime.Decoder
	return runtime.DecoderFunc(func(v any) error {
		if inner == nil {
			body, err := readWhole(r)
			if err != nil {
				return err
			}
			if desc := descriptorOf(v); desc != nil && mayHoldNumberString(body) {
				if path, value, found := stringInteger(body, desc, m.StrictIntegers); found {
					return &decodeError{msg: fmt.Sprintf("%s: must be an integer, not the string %s", path, strconv.Quote(value)),
						err: errStringInteger}
				}
			}
			if msg, ok := v.(proto.Message); ok {
				// The body is in memory: protojson decodes it in place,
				// where the streaming decoder would buffer it and copy it
				// once more (a video body may be 32 MiB). protojson takes
				// only a whole body that is one valid value, as the
				// streaming decoder does; anything it refuses is decoded
				// again by that decoder, whose errors name the field as
				// the request spelled it.
				if err := m.UnmarshalOptions.Unmarshal(body, msg); err == nil {
					inner = decodedWhole{}
					return nil
				}
				proto.Reset(msg)
			}
			inner = m.newDecoder(bytes.NewReader(body))
		}
		return inner.Decode(v)
	})
}

// decodedWhole follows a body decoded whole: there is no further value,
// as a streaming decoder at the end of its input says.
type decodedWhole struct{}

func (decodedWhole) Decode(any) error { return io.EOF }

// HeldBody is a body already read into memory that gives its bytes
// without a copy (the gateway's edge holds every JSON body it checked).
// HeldBytes returns what is left of it and reads it; the bytes are only
// read, never changed. A video body may be 32 MiB.
type HeldBody interface{ HeldBytes() []byte }

// readWhole reads r to its end, taking a held body's bytes as they are.
func readWhole(r io.Reader) ([]byte, error) {
	if h, ok := r.(HeldBody); ok {
		return h.HeldBytes(), nil
	}
	return io.ReadAll(r)
}

// newDecoder is NewDecoder without StrictIntegers.
func (m *Marshaler) newDecoder(r io.Reader) runtime.Decoder {
	d := m.namingDecoder(r)
	return runtime.DecoderFunc(func(v any) error { return tidy(d.Decode(v)) })
}

// protojsonPrefix is what protojson puts before its messages: "proto:", a
// space it makes non-breaking in some builds on purpose, and for most
// errors a position, "(line 1:7435): ", which counts in a body the client
// never sees as lines (an image's base64) and helps no one once the field
// is named. A syntax error keeps its position, after "syntax error".
var protojsonPrefix = regexp.MustCompile(`^proto:[\s\x{00a0}]*(\(line \d+:\d+\):[\s\x{00a0}]*)?`)

// tidy takes protojson's prefix off a decoding error's message, so that it
// begins with what is wrong: `invalid value for int32 field retry_delay:
// "x"`, `unknown field "size"`, `syntax error (line 1:5): unexpected
// token …`.
func tidy(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	n := len(protojsonPrefix.FindString(msg))
	if n == 0 {
		return err
	}
	return &decodeError{msg: msg[n:], err: err}
}

// namingDecoder decodes with protojson, naming the field of a wrong value
// as the body spells it.
func (m *Marshaler) namingDecoder(r io.Reader) runtime.Decoder {
	body := &headBuffer{max: maxNamedBody}
	// JSONPb's decoder on a json.Decoder of our own, which can tell what
	// follows the body's value.
	jd := json.NewDecoder(io.TeeReader(r, body))
	d := runtime.DecoderWrapper{Decoder: jd, UnmarshalOptions: m.UnmarshalOptions}
	decodes := 0
	return runtime.DecoderFunc(func(v any) error {
		err := d.Decode(v)
		decodes++
		if err == nil {
			// A body is one JSON value: anything after it but white space
			// ({"name": "a"} xyz, a second object) is refused, not ignored.
			if decodes == 1 {
				if _, after := jd.Token(); after != io.EOF {
					return &decodeError{msg: "unexpected data after the JSON body's value", err: errTrailingData}
				}
			}
			return nil
		}
		desc := descriptorOf(v)
		if desc == nil {
			return err
		}
		// Positions count from the value being decoded, which is the
		// body's first only on the first call (a handler makes one).
		if decodes == 1 {
			if m.PathErrors {
				if msg, renamed := pathMessage(err.Error(), desc, body.Bytes()); renamed {
					return &decodeError{msg: msg, err: err}
				}
			}
			if msg, renamed := mapValueName(err.Error(), desc, body.Bytes()); renamed {
				return &decodeError{msg: msg, err: err}
			}
			if msg, renamed := misplacedTokenName(err.Error(), desc, body.Bytes()); renamed {
				return &decodeError{msg: msg, err: err}
			}
		}
		if msg, renamed := protoNames(err.Error(), desc); renamed {
			return &decodeError{msg: msg, err: err}
		}
		return err
	})
}

// maxNamedBody is how much of a body the decoder keeps to name a map's
// value in an error: every route's cap but the video API's, whose large
// bodies are images (a value past it keeps protojson's wording).
const maxNamedBody = 1 << 20

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	bytes.Buffer
	max int
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// protojson's wording varies its spaces on purpose (a non-breaking one
// after "proto:" in some builds), so only the part after it is matched.
var mapValueErr = regexp.MustCompile(`\(line (\d+):(\d+)\): (invalid value for \S+ field )value:`)

// mapValueName rewrites protojson's "(line l:c): invalid value for <kind>
// field value:", about a value of a map, to name the map and the key the
// value is under, as the body has them. body is what the decoder read: its
// first JSON value is the one protojson's position counts in.
func mapValueName(msg string, desc protoreflect.MessageDescriptor, body []byte) (string, bool) {
	m := mapValueErr.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg, false
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	col, _ := strconv.Atoi(msg[m[4]:m[5]])
	raw := bytes.TrimLeft(body, " \t\r\n")
	path := keysAt(raw, offsetOf(raw, line, col))
	name, ok := mapEntry(desc, path)
	if !ok {
		return msg, false
	}
	return msg[:m[7]] + name + ":" + msg[m[1]:], true
}

var misplacedToken = regexp.MustCompile(`syntax error \(line (\d+):(\d+)\): unexpected token .*$`)

// misplacedTokenName adds the field to protojson's "syntax error (line
// l:c): unexpected token …", which is what a value of the wrong shape gets
// (a string for a list, a list for an object): "… for field depends_on".
// Malformed JSON never gets here; the route's decoder reports it first.
func misplacedTokenName(msg string, desc protoreflect.MessageDescriptor, body []byte) (string, bool) {
	m := misplacedToken.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg, false
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	col, _ := strconv.Atoi(msg[m[4]:m[5]])
	raw := bytes.TrimLeft(body, " \t\r\n")
	name, ok := fieldPath(desc, keysAt(raw, offsetOf(raw, line, col)))
	if !ok {
		return msg, false
	}
	return msg + " for field " + name, true
}

// fieldPath names the field that keys (from desc's message down) lead to,
// as the body spells it: `tasks.env["A"]`; false when they lead nowhere.
func fieldPath(desc protoreflect.MessageDescriptor, keys []string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(keys); i++ {
		if desc == nil {
			return "", false
		}
		fd := desc.Fields().ByJSONName(keys[i])
		if fd == nil {
			fd = desc.Fields().ByName(protoreflect.Name(keys[i]))
		}
		if fd == nil {
			return "", false
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(keys[i])
		desc = fd.Message()
		if fd.IsMap() {
			if i+1 < len(keys) {
				i++
				b.WriteString("[" + strconv.Quote(keys[i]) + "]")
			}
			desc = fd.MapValue().Message()
		}
	}
	return b.String(), b.Len() > 0
}

// offsetOf is the byte offset of protojson's position (1-based line, and
// column in runes) in raw.
func offsetOf(raw []byte, line, col int) int {
	off := 0
	for ; line > 1; line-- {
		i := bytes.IndexByte(raw[off:], '\n')
		if i < 0 {
			return len(raw)
		}
		off += i + 1
	}
	for ; col > 1 && off < len(raw); col-- {
		_, n := utf8.DecodeRune(raw[off:])
		off += n
	}
	return off
}

// keysAt returns the keys of the objects enclosing the value that starts
// at offset in raw, outermost first; an array's item adds no key.
func keysAt(raw []byte, offset int) []string {
	type frame struct {
		obj, wantKey bool
		key          string
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		if dec.InputOffset() > int64(offset) {
			var keys []string
			for _, f := range stack {
				if f.obj {
					keys = append(keys, f.key)
				}
			}
			return keys
		}
		top := len(stack) - 1
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, frame{obj: t == '{', wantKey: t == '{'})
				continue
			default:
				stack = stack[:top]
				top--
			}
		case string:
			if top >= 0 && stack[top].wantKey {
				stack[top].key, stack[top].wantKey = t, false
				continue
			}
		}
		// A value ended: the object it was in wants its next key.
		if top >= 0 && stack[top].obj {
			stack[top].wantKey = true
		}
	}
}

// mapEntry names, as `field["key"]`, the map value that path (keys from
// desc's message down) leads to; false when path does not end at a value
// of a map field.
func mapEntry(desc protoreflect.MessageDescriptor, path []string) (string, bool) {
	if len(path) < 2 {
		return "", false
	}
	for i, k := range path[:len(path)-1] {
		if desc == nil {
			return "", false
		}
		fd := desc.Fields().ByJSONName(k)
		if fd == nil {
			fd = desc.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil {
			return "", false
		}
		if fd.IsMap() {
			if i != len(path)-2 {
				return "", false
			}
			return string(fd.Name()) + "[" + strconv.Quote(path[len(path)-1]) + "]", true
		}
		desc = fd.Message()
	}
	return "", false
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
// errTrailingData is what a refusal of data after the body's value
// unwraps to.
var errTrailingData = errors.New("data after the JSON value")

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
