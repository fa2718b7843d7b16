package apijson

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// protojson's errors about a value, each with its position in the body:
// a value of the wrong JSON type for a scalar field, a key of no field or
// one given twice in its object, and a token of the wrong shape (an object
// for a string, a string for a list).
var (
	positionedInvalid = regexp.MustCompile(`\(line (\d+):(\d+)\):[\s\x{00a0}]*invalid value for \S+ field \S+: (.*)$`)
	positionedKey     = regexp.MustCompile(`\(line (\d+):(\d+)\):[\s\x{00a0}]*(unknown|duplicate) field "(.*)"$`)
	positionedToken   = regexp.MustCompile(`syntax error \(line (\d+):(\d+)\): unexpected token (.*)$`)
)

// pathMessage rewrites protojson's error about a value of the body into
// the form an API with PathErrors answers: the field's path as the body
// spells it, then what is wrong, as `parameters.seed: must be an integer,
// not the string "abc"`, `webhook.secret: unknown field`,
// `parameters.seed: duplicate field` or
// `input.prompt: must be a string, not an object`. body is what the
// decoder read; false when the error is about something else or its
// position leads to no field.
func pathMessage(msg string, desc protoreflect.MessageDescriptor, body []byte) (string, bool) {
	at := func(m []string) []string {
		line, _ := strconv.Atoi(m[1])
		col, _ := strconv.Atoi(m[2])
		raw := bytes.TrimLeft(body, " \t\r\n")
		return keysAt(raw, offsetOf(raw, line, col))
	}
	if m := positionedKey.FindStringSubmatch(msg); m != nil {
		keys := at(m)
		if len(keys) == 0 {
			return msg, false
		}
		// The innermost object's key is not read yet: it is the unknown
		// or repeated one.
		what, key := m[3]+" field", m[4]
		if len(keys) == 1 {
			return key + ": " + what, true
		}
		path, ok := fieldPath(desc, keys[:len(keys)-1])
		if !ok {
			return msg, false
		}
		return path + "." + key + ": " + what, true
	}
	m := positionedInvalid.FindStringSubmatch(msg)
	if m == nil {
		m = positionedToken.FindStringSubmatch(msg)
	}
	if m == nil {
		return msg, false
	}
	keys := at(m)
	fd := fieldAt(desc, keys)
	path, ok := fieldPath(desc, keys)
	if fd == nil || !ok {
		return msg, false
	}
	return path + ": must be " + expected(fd) + ", not " + given(m[3]), true
}

// fieldAt is the field keys lead to from desc's message (a map's value
// counting as its map's), nil when they lead nowhere.
func fieldAt(desc protoreflect.MessageDescriptor, keys []string) protoreflect.FieldDescriptor {
	var fd protoreflect.FieldDescriptor
	for i := 0; i < len(keys); i++ {
		if desc == nil {
			return nil
		}
		if fd = desc.Fields().ByJSONName(keys[i]); fd == nil {
			fd = desc.Fields().ByName(protoreflect.Name(keys[i]))
		}
		if fd == nil {
			return nil
		}
		desc = fd.Message()
		if fd.IsMap() {
			i++
			desc = fd.MapValue().Message()
		}
	}
	return fd
}

// expected says what a field takes, in JSON's terms.
func expected(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "an object"
	case fd.IsList():
		return "a list"
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BytesKind:
		return "base64 text"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	case protoreflect.EnumKind:
		return "one of its names"
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "an object"
	}
	return "an integer"
}

// given describes a JSON token as protojson prints it.
func given(token string) string {
	switch {
	case strings.HasPrefix(token, `"`):
		return "the string " + token
	case token == "{":
		return "an object"
	case token == "[":
		return "a list"
	}
	return token
}
