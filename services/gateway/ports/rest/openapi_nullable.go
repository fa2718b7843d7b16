package rest

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The REST answers carry every field, and a field with presence (a message,
// a timestamp, a wrapper, a proto3 optional scalar) that is unset is
// written as null (docs/api/README.md, "JSON"). The generator marks none
// of them nullable, so a client generated from the document that checks
// nullability (C#'s, a response validator) would refuse a task that has
// not started: "started_at": null. markNullable adds x-nullable to each
// such property, read from the messages themselves, not from the
// property's JSON type, which cannot tell an optional int32 from a plain
// one.

// definitionMessages indexes the registered Taskmesh messages by the
// names protoc-gen-openapiv2 gives their definitions: "v1Task" (the last
// package element and the name, nested names joined: "v1TaskGroupMember"
// for TaskGroup.Member), the fully qualified "taskmeshAdminV1Tenant" when
// that short name is taken twice, and "<Service><Method>Body" for a
// request body whose other fields are path parameters.
func definitionMessages() map[string][]protoreflect.MessageDescriptor {
	index := map[string][]protoreflect.MessageDescriptor{}
	add := func(name string, md protoreflect.MessageDescriptor) { index[name] = append(index[name], md) }
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		pkg := string(f.Package())
		if !strings.HasPrefix(pkg, "taskmesh.") {
			return true
		}
		parts := strings.Split(pkg, ".")
		short := parts[len(parts)-1]
		var full strings.Builder
		for i, p := range parts {
			if i > 0 {
				p = strings.ToUpper(p[:1]) + p[1:]
			}
			full.WriteString(p)
		}
		var walk func(prefix string, msgs protoreflect.MessageDescriptors)
		walk = func(prefix string, msgs protoreflect.MessageDescriptors) {
			for i := 0; i < msgs.Len(); i++ {
				md := msgs.Get(i)
				if md.IsMapEntry() {
					continue
				}
				name := prefix + string(md.Name())
				add(short+name, md)
				add(full.String()+name, md)
				walk(name, md.Messages())
			}
		}
		walk("", f.Messages())
		for i := 0; i < f.Services().Len(); i++ {
			s := f.Services().Get(i)
			for j := 0; j < s.Methods().Len(); j++ {
				m := s.Methods().Get(j)
				add(string(s.Name())+string(m.Name())+"Body", m.Input())
			}
		}
		return true
	})
	return index
}

// fieldOf finds the field a definition's property key names: the field's
// name, or its JSON name in a document generated with JSON names.
func fieldOf(md protoreflect.MessageDescriptor, key string, jsonNames bool) protoreflect.FieldDescriptor {
	if !jsonNames {
		return md.Fields().ByName(protoreflect.Name(key))
	}
	return md.Fields().ByJSONName(key)
}

// messageOf returns the message a definition describes: the candidate of
// its name that has a field for every property. Candidates that fit
// equally (one message seen under two names) are one answer; two
// different messages that both fit are an error.
func messageOf(candidates []protoreflect.MessageDescriptor, props map[string]any, jsonNames bool) (protoreflect.MessageDescriptor, error) {
	var found protoreflect.MessageDescriptor
	for _, md := range candidates {
		fits := true
		for key := range props {
			if fieldOf(md, key, jsonNames) == nil {
				fits = false
				break
			}
		}
		if !fits || (found != nil && found.FullName() == md.FullName()) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("both %s and %s fit", found.FullName(), md.FullName())
		}
		found = md
	}
	return found, nil
}

// markNullable declares x-nullable on every property of defs whose field
// has presence and is not a list or map (those are written as [] and {}).
// It returns the definitions with properties it could not match to a
// message; a test keeps that list empty.
func markNullable(defs map[string]any, jsonNames bool) (unmatched []string, err error) {
	index := definitionMessages()
	for name, d := range defs {
		def, _ := d.(map[string]any)
		props, _ := def["properties"].(map[string]any)
		if len(props) == 0 {
			continue
		}
		md, err := messageOf(index[name], props, jsonNames)
		if err != nil {
			return nil, fmt.Errorf("definition %s: %w", name, err)
		}
		if md == nil {
			unmatched = append(unmatched, name)
			continue
		}
		for key, p := range props {
			fd := fieldOf(md, key, jsonNames)
			if !fd.HasPresence() || fd.IsList() || fd.IsMap() {
				continue
			}
			if schema, ok := p.(map[string]any); ok {
				props[key] = nullable(schema)
			}
		}
	}
	return unmatched, nil
}

// nullable marks schema x-nullable. A reference cannot carry siblings in
// OpenAPI 2.0 (they are ignored), so it moves into an allOf, as the
// generator's own use_allof_for_refs writes it.
func nullable(schema map[string]any) map[string]any {
	ref, isRef := schema["$ref"]
	if !isRef {
		schema["x-nullable"] = true
		return schema
	}
	out := map[string]any{"allOf": []any{map[string]any{"$ref": ref}}, "x-nullable": true}
	for k, v := range schema {
		if k != "$ref" {
			out[k] = v
		}
	}
	return out
}
