// Package apijson writes protobuf messages as the REST API's JSON
// (docs/api/README.md#json) faster than protojson, with the same output.
//
// protojson walks every message through generic wrappers: it sorts each
// message's fields by declaration index, wraps the message to range over
// unpopulated fields, and re-checks its options per value. On the answers
// the task routes write (a Task of some forty fields, most of them empty)
// that was a quarter of the gateway's CPU per request. Here the walk is
// planned once per message type: fields in declaration order with their
// quoted names ready, what an unset field writes decided up front.
//
// The output is protojson's, byte for byte once protojson's deliberately
// random spaces are compacted away (it adds a space after some commas so
// that nobody depends on its bytes; JSON readers do not see it). That holds
// for the message types the plan supports: every scalar kind, enums,
// nested messages, repeated fields, maps, and the well-known Timestamp,
// Duration and Empty (an ordinary message in JSON). A message that reaches any other well-known type
// (Any, Struct, Value, wrappers, FieldMask), an extension or a required
// field, and any value the fast path cannot write (invalid UTF-8, a
// timestamp out of range) goes to protojson itself, so errors are its
// errors too. apijson_test.go compares the two on every message type the
// API serves. One option departs from protojson on purpose: NullOptional
// writes an unset proto3 optional field as null rather than leaving it
// out, so the task API's answers carry every field.
package apijson

import (
	"encoding/base64"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Options are the protojson options the fast path honours. Any other
// protojson option (Multiline, Indent, AllowPartial, a Resolver) makes
// Marshal hand every message to protojson.
type Options struct {
	protojson.MarshalOptions
	// NullOptional writes an unset proto3 optional field as null, as
	// EmitUnpopulated writes other unset fields with presence, instead of
	// leaving it out as protojson does (it treats such a field as a oneof
	// member). It needs EmitUnpopulated, and holds for the message types
	// the fast path writes; those handed to protojson are protojson's.
	NullOptional bool
}

// fast reports whether o's options are ones the plans implement.
func (o Options) fast() bool {
	return !o.Multiline && o.Indent == "" && o.Resolver == nil
}

// Marshal writes m as protojson with o's options would.
func (o Options) Marshal(m proto.Message) ([]byte, error) {
	if m == nil || !o.fast() {
		return o.MarshalOptions.Marshal(m)
	}
	rm := m.ProtoReflect()
	if !rm.IsValid() {
		return o.MarshalOptions.Marshal(m)
	}
	p := planFor(rm.Descriptor())
	if !p.supported {
		return o.MarshalOptions.Marshal(m)
	}
	w := writer{opts: o, buf: make([]byte, 0, p.sizeHint())}
	if err := w.message(rm, p); err != nil {
		// The fast path writes only what protojson would; anything it
		// refuses (invalid UTF-8, out-of-range times) is protojson's to
		// answer, with its error.
		return o.MarshalOptions.Marshal(m)
	}
	p.observeSize(len(w.buf))
	return w.buf, nil
}

// errFallback stops the fast path at a value protojson must write.
var errFallback = errors.New("apijson: value needs protojson")

// plan is how one message type is written.
type plan struct {
	desc      protoreflect.MessageDescriptor
	supported bool
	wkt       wellKnown
	fields    []fieldPlan
	// lastSize is the length of the last output, the next buffer's
	// starting capacity: most answers of one type are of similar size.
	lastSize atomic.Int64
}

func (p *plan) sizeHint() int {
	return max(256, int(p.lastSize.Load())*9/8)
}

func (p *plan) observeSize(n int) { p.lastSize.Store(int64(n)) }

type fieldPlan struct {
	fd protoreflect.FieldDescriptor
	// protoName and jsonName are the quoted key with its colon, for
	// UseProtoNames and for the default JSON names.
	protoName, jsonName []byte
	inOneof             bool // skipped unless set (oneof members, proto3 optional)
	optional            bool // a proto3 optional field: null when unset with NullOptional
	presence            bool // unset writes null (or is skipped without EmitUnpopulated)
	// elem is the plan of the field's message type, or its map value's.
	elem *plan
}

// wellKnown marks the well-known types with a JSON form of their own.
type wellKnown int

const (
	notWellKnown wellKnown = iota
	timestampType
	durationType
)

var plans sync.Map // protoreflect.FullName → *plan

// planFor returns the plan of desc, building it (and its message fields'
// plans) on first use.
func planFor(desc protoreflect.MessageDescriptor) *plan {
	if p, ok := plans.Load(desc.FullName()); ok {
		return p.(*plan)
	}
	building := map[protoreflect.FullName]*plan{}
	p := build(desc, building)
	// Support is decided over the whole graph of message types reachable
	// from desc, after it is built: a type may reach itself.
	for _, q := range building {
		q.supported = reachesOnlySupported(q, map[*plan]bool{})
	}
	for name, q := range building {
		plans.LoadOrStore(name, q)
	}
	got, _ := plans.Load(desc.FullName())
	if got == nil {
		return p
	}
	return got.(*plan)
}

func build(desc protoreflect.MessageDescriptor, building map[protoreflect.FullName]*plan) *plan {
	if p, ok := plans.Load(desc.FullName()); ok {
		return p.(*plan)
	}
	if p, ok := building[desc.FullName()]; ok {
		return p
	}
	p := &plan{desc: desc, supported: true}
	building[desc.FullName()] = p
	if desc.FullName().Parent() == "google.protobuf" {
		switch desc.Name() {
		case "Timestamp":
			p.wkt = timestampType
			return p
		case "Duration":
			p.wkt = durationType
			return p
		case "Any", "Struct", "Value", "ListValue", "FieldMask",
			"BoolValue", "Int32Value", "Int64Value", "UInt32Value", "UInt64Value",
			"FloatValue", "DoubleValue", "StringValue", "BytesValue":
			p.supported = false
			return p
		}
	}
	if desc.ExtensionRanges().Len() > 0 {
		p.supported = false
	}
	fds := desc.Fields()
	p.fields = make([]fieldPlan, 0, fds.Len())
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.Cardinality() == protoreflect.Required || fd.Kind() == protoreflect.GroupKind {
			p.supported = false
		}
		f := fieldPlan{
			fd:        fd,
			protoName: quotedKey(fd.TextName()),
			jsonName:  quotedKey(fd.JSONName()),
			inOneof:   fd.ContainingOneof() != nil,
			optional:  fd.HasOptionalKeyword() && fd.ContainingOneof() != nil && fd.ContainingOneof().IsSynthetic(),
			presence:  fd.HasPresence(),
		}
		switch {
		case fd.IsMap():
			if v := fd.MapValue(); v.Kind() == protoreflect.MessageKind || v.Kind() == protoreflect.GroupKind {
				f.elem = build(v.Message(), building)
			}
		case fd.Kind() == protoreflect.MessageKind:
			f.elem = build(fd.Message(), building)
		}
		p.fields = append(p.fields, f)
	}
	return p
}

// reachesOnlySupported reports whether p and every message type its fields
// reach can be written here.
func reachesOnlySupported(p *plan, seen map[*plan]bool) bool {
	if seen[p] {
		return true
	}
	seen[p] = true
	if !p.supported {
		return false
	}
	for _, f := range p.fields {
		if f.elem != nil && !reachesOnlySupported(f.elem, seen) {
			return false
		}
	}
	return true
}

// quotedKey is name as a JSON object key with its colon. Field names are
// identifiers, so they need no escaping; one that did would go through
// appendString all the same.
func quotedKey(name string) []byte {
	b, _ := appendString(nil, name)
	return append(b, ':')
}

type writer struct {
	opts Options
	buf  []byte
}

func (w *writer) message(m protoreflect.Message, p *plan) error {
	switch p.wkt {
	case timestampType:
		return w.timestamp(m)
	case durationType:
		return w.duration(m)
	}
	w.buf = append(w.buf, '{')
	first := true
	for i := range p.fields {
		f := &p.fields[i]
		fd := f.fd
		var v protoreflect.Value
		switch {
		case !f.inOneof && !f.presence && w.opts.EmitUnpopulated:
			// Written set or not, as its value or its zero value: no
			// need to ask whether it is set.
			v = m.Get(fd)
		case m.Has(fd):
			v = m.Get(fd)
		default:
			switch {
			case f.optional && w.opts.NullOptional && w.opts.EmitUnpopulated:
				// An invalid value writes null.
			case f.inOneof:
				continue
			case !w.opts.EmitUnpopulated && !w.opts.EmitDefaultValues:
				continue
			case f.presence:
				if !w.opts.EmitUnpopulated {
					continue
				}
				// An invalid value writes null.
			default:
				v = m.Get(fd)
			}
		}
		if !first {
			w.buf = append(w.buf, ',')
		}
		first = false
		if w.opts.UseProtoNames {
			w.buf = append(w.buf, f.protoName...)
		} else {
			w.buf = append(w.buf, f.jsonName...)
		}
		var err error
		switch {
		case fd.IsList():
			err = w.list(v.List(), f)
		case fd.IsMap():
			err = w.mapValue(v.Map(), f)
		default:
			err = w.singular(v, fd, f.elem)
		}
		if err != nil {
			return err
		}
	}
	w.buf = append(w.buf, '}')
	return nil
}

func (w *writer) singular(v protoreflect.Value, fd protoreflect.FieldDescriptor, elem *plan) error {
	if !v.IsValid() {
		w.buf = append(w.buf, "null"...)
		return nil
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		w.buf = strconv.AppendBool(w.buf, v.Bool())
	case protoreflect.StringKind:
		var err error
		if w.buf, err = appendString(w.buf, v.String()); err != nil {
			return err
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		w.buf = strconv.AppendInt(w.buf, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		w.buf = strconv.AppendUint(w.buf, v.Uint(), 10)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		// 64-bit integers are strings in protobuf JSON.
		w.buf = append(w.buf, '"')
		w.buf = strconv.AppendInt(w.buf, v.Int(), 10)
		w.buf = append(w.buf, '"')
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		w.buf = append(w.buf, '"')
		w.buf = strconv.AppendUint(w.buf, v.Uint(), 10)
		w.buf = append(w.buf, '"')
	case protoreflect.FloatKind:
		w.buf = appendFloat(w.buf, v.Float(), 32)
	case protoreflect.DoubleKind:
		w.buf = appendFloat(w.buf, v.Float(), 64)
	case protoreflect.BytesKind:
		w.buf = append(w.buf, '"')
		w.buf = base64.StdEncoding.AppendEncode(w.buf, v.Bytes())
		w.buf = append(w.buf, '"')
	case protoreflect.EnumKind:
		ed := fd.Enum()
		if ed.FullName() == "google.protobuf.NullValue" {
			w.buf = append(w.buf, "null"...)
			return nil
		}
		n := v.Enum()
		if vd := ed.Values().ByNumber(n); vd != nil && !w.opts.UseEnumNumbers {
			w.buf = append(w.buf, '"')
			w.buf = append(w.buf, vd.Name()...)
			w.buf = append(w.buf, '"')
		} else {
			w.buf = strconv.AppendInt(w.buf, int64(n), 10)
		}
	case protoreflect.MessageKind:
		return w.message(v.Message(), elem)
	default:
		return errFallback
	}
	return nil
}

func (w *writer) list(l protoreflect.List, f *fieldPlan) error {
	w.buf = append(w.buf, '[')
	for i := range l.Len() {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		if err := w.singular(l.Get(i), f.fd, f.elem); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, ']')
	return nil
}

// mapValue writes a map's entries in protojson's order: false before
// true, numbers ascending, strings by bytes.
func (w *writer) mapValue(m protoreflect.Map, f *fieldPlan) error {
	keys := make([]protoreflect.MapKey, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	switch f.fd.MapKey().Kind() {
	case protoreflect.BoolKind:
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int {
			switch {
			case a.Bool() == b.Bool():
				return 0
			case !a.Bool():
				return -1
			}
			return 1
		})
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return cmpInt(a.Int(), b.Int()) })
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return cmpInt(a.Uint(), b.Uint()) })
	default:
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return strings.Compare(a.String(), b.String()) })
	}
	vd := f.fd.MapValue()
	w.buf = append(w.buf, '{')
	for i, k := range keys {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		var err error
		if w.buf, err = appendString(w.buf, k.String()); err != nil {
			return err
		}
		w.buf = append(w.buf, ':')
		if err := w.singular(m.Get(k), vd, f.elem); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, '}')
	return nil
}

func cmpInt[T int64 | uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The ranges protojson accepts for Timestamp and Duration.
const (
	minTimestampSeconds = -62135596800 // 0001-01-01T00:00:00Z
	maxTimestampSeconds = 253402300799 // 9999-12-31T23:59:59Z
	maxDurationSeconds  = 315576000000 // 10,000 years
	nanosPerSecond      = 1_000_000_000
)

// timestamp writes RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits.
func (w *writer) timestamp(m protoreflect.Message) error {
	fds := m.Descriptor().Fields()
	secs := m.Get(fds.ByNumber(1)).Int()
	nanos := m.Get(fds.ByNumber(2)).Int()
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos >= nanosPerSecond {
		return errFallback
	}
	w.buf = append(w.buf, '"')
	w.buf = time.Unix(secs, nanos).UTC().AppendFormat(w.buf, "2006-01-02T15:04:05")
	w.buf = appendFraction(w.buf, nanos)
	w.buf = append(w.buf, 'Z', '"')
	return nil
}

// duration writes seconds with 0, 3, 6 or 9 fractional digits and "s".
func (w *writer) duration(m protoreflect.Message) error {
	fds := m.Descriptor().Fields()
	secs := m.Get(fds.ByNumber(1)).Int()
	nanos := m.Get(fds.ByNumber(2)).Int()
	if secs < -maxDurationSeconds || secs > maxDurationSeconds || nanos <= -nanosPerSecond || nanos >= nanosPerSecond ||
		secs > 0 && nanos < 0 || secs < 0 && nanos > 0 {
		return errFallback
	}
	w.buf = append(w.buf, '"')
	if secs < 0 || nanos < 0 {
		w.buf = append(w.buf, '-')
		secs, nanos = -secs, -nanos
	}
	w.buf = strconv.AppendInt(w.buf, secs, 10)
	w.buf = appendFraction(w.buf, nanos)
	w.buf = append(w.buf, 's', '"')
	return nil
}

// appendFraction appends ".ddd", ".dddddd" or ".ddddddddd", the fewest
// groups of three that hold nanos, or nothing for 0.
func appendFraction(b []byte, nanos int64) []byte {
	if nanos == 0 {
		return b
	}
	digits := 9
	for digits > 3 && nanos%1000 == 0 {
		nanos /= 1000
		digits -= 3
	}
	b = append(b, '.')
	s := strconv.AppendInt(nil, nanos, 10)
	for range digits - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// appendString quotes s as protojson does: only '"', '\\' and control
// characters are escaped (no HTML escaping); invalid UTF-8 is an error.
func appendString(out []byte, s string) ([]byte, error) {
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return out, errFallback
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			i++
			continue
		}
		out = append(out, s[start:i]...)
		out = append(out, '\\')
		switch c {
		case '"', '\\':
			out = append(out, c)
		case '\b':
			out = append(out, 'b')
		case '\f':
			out = append(out, 'f')
		case '\n':
			out = append(out, 'n')
		case '\r':
			out = append(out, 'r')
		case '\t':
			out = append(out, 't')
		default:
			const hex = "0123456789abcdef"
			out = append(out, 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	out = append(out, s[start:]...)
	return append(out, '"'), nil
}

// appendFloat writes n as protojson does: encoding/json's number format,
// and NaN and the infinities as strings.
func appendFloat(out []byte, n float64, bits int) []byte {
	switch {
	case math.IsNaN(n):
		return append(out, `"NaN"`...)
	case math.IsInf(n, 1):
		return append(out, `"Infinity"`...)
	case math.IsInf(n, -1):
		return append(out, `"-Infinity"`...)
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	out = strconv.AppendFloat(out, n, format, -1, bits)
	if format == 'e' {
		// "1e-07" becomes "1e-7", as encoding/json writes it.
		k := len(out)
		if k >= 4 && out[k-4] == 'e' && out[k-3] == '-' && out[k-2] == '0' {
			out[k-2] = out[k-1]
			out = out[:k-1]
		}
	}
	return out
}

// Marshaler is grpc-gateway's JSONPb with its Marshal, the one every
// answer of the generated handlers goes through, on the fast path.
// Decoding and streaming encoders are JSONPb's.
type Marshaler struct {
	runtime.JSONPb
	// NullOptional is Options.NullOptional.
	NullOptional bool
	// StrictIntegers refuses a JSON string where the request has an
	// integer field ("seed": "10"), which protojson takes as protobuf
	// JSON allows: for an API whose document types such fields
	// *integer* (the video API). The body is read whole before it is
	// decoded; the route's size cap still bounds it.
	StrictIntegers bool
	// StrictInt32 is StrictIntegers for 32-bit fields only: an API whose
	// answers write 64-bit integers as strings, as protobuf JSON does,
	// takes them back in that form (the task API's size_bytes), while
	// its counts, seconds and priorities are numbers.
	StrictInt32 bool
	// PathErrors names a value of the wrong type, a key of no field and a
	// value of the wrong shape by the field's path in the body, then says
	// what is wrong (`parameters.seed: must be an integer, not the string
	// "abc"`, `webhook.secret: unknown field`): for an API whose messages
	// all begin with the path (the video API).
	PathErrors bool
}

// Marshal writes v: a proto message as Options.Marshal does, anything
// else as JSONPb.
func (m *Marshaler) Marshal(v any) ([]byte, error) {
	if pm, ok := v.(proto.Message); ok {
		return Options{MarshalOptions: m.MarshalOptions, NullOptional: m.NullOptional}.Marshal(pm)
	}
	return m.JSONPb.Marshal(v)
}
