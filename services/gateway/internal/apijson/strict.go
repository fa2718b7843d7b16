package apijson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// errStringInteger is what a StrictIntegers decoder's refusal unwraps to.
var errStringInteger = errors.New("a string in an integer field")

// stringInteger finds the first value of body that is a JSON string where
// desc (the message body decodes into) has an integer field: protojson
// takes "10" for 10, as protobuf JSON allows, but an API whose document
// types the field *integer* refuses it (Marshaler.StrictIntegers). It
// returns the value's path as the body spells it ("parameters.seed",
// `env["A"]`, "ids[2]") and the string as sent. Malformed JSON and values
// of any other wrong type find nothing here: protojson reports them.
// Without wide, 64-bit fields are left to protojson: protobuf JSON writes
// them as strings, so a client may send back what it read
// (Marshaler.StrictInt32).
func stringInteger(body []byte, desc protoreflect.MessageDescriptor, wide bool) (path, value string, found bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	s := integerScan{dec: dec, wide: wide}
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return "", "", false
	}
	s.object(desc, "")
	return s.path, s.value, s.found
}

// mayHoldNumberString reports whether body has a JSON string that begins
// like a number (a quote, then a digit or a sign), which protojson could
// take for an integer. Most bodies have none, and this one pass over the
// bytes spares them stringInteger's walk.
func mayHoldNumberString(body []byte) bool {
	for i := bytes.IndexByte(body, '"'); i >= 0 && i+1 < len(body); {
		switch c := body[i+1]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.':
			return true
		}
		next := bytes.IndexByte(body[i+1:], '"')
		if next < 0 {
			return false
		}
		i += 1 + next
	}
	return false
}

// integerScan walks one JSON document with the message it decodes into.
// It stops at the first finding or syntax error (stopped).
type integerScan struct {
	dec          *json.Decoder
	wide         bool // 64-bit fields are checked too
	path, value  string
	found, ended bool
}

func (s *integerScan) stopped() bool { return s.found || s.ended }

func (s *integerScan) token() json.Token {
	tok, err := s.dec.Token()
	if err != nil {
		s.ended = true
		return nil
	}
	return tok
}

// object reads the members of an object whose '{' was read, up to its '}'.
func (s *integerScan) object(desc protoreflect.MessageDescriptor, prefix string) {
	for !s.stopped() {
		tok := s.token()
		key, ok := tok.(string)
		if !ok {
			return // '}' or an error
		}
		var fd protoreflect.FieldDescriptor
		if desc != nil {
			if fd = desc.Fields().ByJSONName(key); fd == nil {
				fd = desc.Fields().ByName(protoreflect.Name(key))
			}
		}
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		s.field(fd, path)
	}
}

// field reads the value of field fd (nil: unknown, skipped) at path.
func (s *integerScan) field(fd protoreflect.FieldDescriptor, path string) {
	tok := s.token()
	switch {
	case s.stopped():
	case fd == nil:
		s.skip(tok)
	case fd.IsMap():
		if tok != json.Delim('{') {
			s.skip(tok)
			return
		}
		for !s.stopped() {
			key, ok := s.token().(string)
			if !ok {
				return
			}
			s.single(fd.MapValue(), path+"["+strconv.Quote(key)+"]", s.token())
		}
	case fd.IsList():
		if tok != json.Delim('[') {
			s.skip(tok)
			return
		}
		for i := 0; !s.stopped(); i++ {
			if !s.dec.More() {
				s.token() // ']'
				return
			}
			s.single(fd, fmt.Sprintf("%s[%d]", path, i), s.token())
		}
	default:
		s.single(fd, path, tok)
	}
}

// single checks one value (tok, its first token) of fd's kind at path.
func (s *integerScan) single(fd protoreflect.FieldDescriptor, path string, tok json.Token) {
	if s.stopped() {
		return
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if str, ok := tok.(string); ok {
			s.path, s.value, s.found = path, str, true
			return
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if str, ok := tok.(string); ok && s.wide {
			s.path, s.value, s.found = path, str, true
			return
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		// Well-known types have JSON forms of their own (a Timestamp is
		// a string); only the API's own messages are walked.
		if tok == json.Delim('{') && fd.Message().FullName().Parent() != "google.protobuf" {
			s.object(fd.Message(), path)
			return
		}
	}
	s.skip(tok)
}

// skip reads the rest of a value whose first token was tok.
func (s *integerScan) skip(tok json.Token) {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return
	}
	for depth := 1; depth > 0 && !s.stopped(); {
		switch s.token() {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}
