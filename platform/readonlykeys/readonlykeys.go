// Package readonlykeys drops, from a JSON request body, the keys of a
// message as an API answers it that the request's message does not
// accept: what only the server sets (a task's status, its attempt, its
// timestamps). A client may then send back a resource as it read it, or
// write one with every field of its model, and have the server's own
// fields left out, while a key of neither message still reaches the
// decoder and is refused there as unknown.
package readonlykeys

import (
	"bytes"
	"encoding/json"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Keys names JSON keys of an object: a nil subtree drops the key, a
// non-nil one drops keys inside the object the key holds.
type Keys map[string]Keys

// Between returns the keys of shown that accepted does not have, by both
// names protojson reads a field under (its proto name and its JSON name).
// A message field of both, of different message types, is descended into:
// only its keys that the accepted one lacks are dropped.
func Between(shown, accepted protoreflect.MessageDescriptor) Keys {
	t := Keys{}
	fields := shown.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		var sub Keys
		a := accepted.Fields().ByName(f.Name())
		switch {
		case a == nil:
		case f.Message() != nil && a.Message() != nil && !f.IsMap() && !a.IsMap() && f.IsList() == a.IsList() &&
			f.Message().FullName() != a.Message().FullName():
			if sub = Between(f.Message(), a.Message()); len(sub) == 0 {
				continue
			}
		default:
			continue
		}
		t[string(f.Name())], t[f.JSONName()] = sub, sub
	}
	return t
}

// Drop returns obj, a JSON object, without keys, and whether anything was
// dropped. Anything that is not a JSON object is returned as it is, for
// the route's decoder to report.
func Drop(obj []byte, keys Keys) ([]byte, bool) {
	if t := bytes.TrimLeft(obj, " \t\r\n"); len(t) == 0 || t[0] != '{' || !mayHold(obj, keys) {
		return obj, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return obj, false
	}
	changed := false
	for k, v := range m {
		sub, ok := keys[k]
		switch {
		case !ok:
		case sub == nil:
			delete(m, k)
			changed = true
		default:
			if inner, ch := Drop(v, sub); ch {
				m[k], changed = inner, true
			}
		}
	}
	if !changed {
		return obj, false
	}
	out, err := json.Marshal(m)
	if err != nil {
		return obj, false
	}
	return out, true
}

// mayHold reports whether obj may have one of keys' names as a key: it
// spells one between quotes, or holds an escape, which could spell one
// ("st\u0061tus"). Names inside a subtree need their parent's key, so
// the top level's names are enough. Most bodies (a client sending only
// what it may set) have none, and are passed on without being decoded.
func mayHold(obj []byte, keys Keys) bool {
	if bytes.IndexByte(obj, '\\') >= 0 {
		return true
	}
	var buf [64]byte
	for k := range keys {
		if bytes.Contains(obj, append(append(append(buf[:0], '"'), k...), '"')) {
			return true
		}
	}
	return false
}
