package ctl

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// This file turns a template file (docs/ctl.md#template-files) into a
// TaskTemplate. Its keys are the TaskTemplate's fields (and TemplateVar's
// in variables), checked against the message's descriptor while the YAML
// node tree is walked, so that an unknown key or a wrong type is named at
// the file's line with its key path, as in task and group files, rather
// than by protojson at a position in a JSON text the user never wrote.
// The checked tree is then handed to protojson, which knows the values'
// encodings (timestamps, enums).

// ParseTemplateFile reads the one template of a file.
func ParseTemplateFile(name string, data []byte) (*taskv1.TaskTemplate, error) {
	p := &fileParser{file: name}
	var root *yaml.Node
	err := decodeDocuments(name, data, func(doc *yaml.Node) error {
		if len(doc.Content) == 0 || isNull(deref(doc.Content[0])) {
			return nil
		}
		n := deref(doc.Content[0])
		if root != nil {
			return p.errorf(n, "a template file holds one template (a second document starts here)")
		}
		root = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	if root == nil {
		return nil, &FileError{File: name, Msg: "no template in file"}
	}
	var t taskv1.TaskTemplate
	v, err := p.message(root, t.ProtoReflect().Descriptor(), "")
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, &FileError{File: name, Msg: err.Error()}
	}
	if err := protojson.Unmarshal(raw, &t); err != nil {
		// Only values whose encoding protojson checks itself (a
		// timestamp, say) get here; its position is in raw, not the file.
		return nil, &FileError{File: name, Msg: "not a template: " + protojsonPosition.ReplaceAllString(err.Error(), "")}
	}
	return &t, nil
}

// protojson separates its prefix with a space that varies on purpose.
var protojsonPosition = regexp.MustCompile(`^proto:[^(\pL]*(\(line \d+:\d+\):[^\pL]*)?`)

// message checks a mapping against a message's fields and returns it as a
// JSON object keyed by the fields' JSON names. path is the key path for
// messages ("" for the template itself).
func (p *fileParser) message(n *yaml.Node, md protoreflect.MessageDescriptor, path string) (map[string]any, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, "%s: want a mapping, got %s", orWhat(path, "template"), kindName(n))
	}
	pairs, err := p.pairs(n, path)
	if err != nil {
		return nil, err
	}
	fields := md.Fields()
	out := make(map[string]any, len(pairs))
	for _, kv := range pairs {
		fd := fields.ByName(protoreflect.Name(kv.key))
		if fd == nil {
			fd = fields.ByJSONName(kv.key)
		}
		if fd == nil {
			known := make([]string, fields.Len())
			for i := range known {
				known[i] = string(fields.Get(i).Name())
			}
			return nil, p.unknown(kv.k, orWhat(path, "template"), known)
		}
		if isNull(kv.v) {
			continue
		}
		f := join(path, kv.key)
		var v any
		switch {
		case fd.IsList():
			v, err = p.list(kv.v, fd, f)
		case fd.IsMap():
			v, err = p.protoMap(kv.v, fd, f)
		default:
			v, err = p.value(kv.v, fd, f)
		}
		if err != nil {
			return nil, err
		}
		out[fd.JSONName()] = v
	}
	return out, nil
}

func (p *fileParser) list(n *yaml.Node, fd protoreflect.FieldDescriptor, path string) ([]any, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, "%s: want a list, got %s", path, describe(n))
	}
	out := make([]any, 0, len(n.Content))
	for i, item := range n.Content {
		v, err := p.value(deref(item), fd, fmt.Sprintf("%s[%d]", path, i))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (p *fileParser) protoMap(n *yaml.Node, fd protoreflect.FieldDescriptor, path string) (map[string]any, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, "%s: want a mapping of names to values, got %s", path, describe(n))
	}
	pairs, err := p.pairs(n, path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(pairs))
	for _, kv := range pairs {
		v, err := p.value(kv.v, fd.MapValue(), path+"."+kv.key)
		if err != nil {
			return nil, err
		}
		out[kv.key] = v
	}
	return out, nil
}

// value reads one value of a field's kind. Strings take any scalar as
// written (a variable's default: 10 is "10"), as task files do.
func (p *fileParser) value(n *yaml.Node, fd protoreflect.FieldDescriptor, path string) (any, error) {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		md := fd.Message()
		if md.FullName().Parent() != "google.protobuf" {
			return p.message(n, md, path)
		}
		// Well-known types (a Timestamp) are JSON strings.
	}
	if n.Kind != yaml.ScalarNode {
		return nil, p.errorf(n, "%s: want a single value, got %s", path, kindName(n))
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		var v int64
		if n.Tag != "!!int" {
			return nil, p.errorf(n, "%s: want a whole number, got %s", path, describe(n))
		}
		if err := n.Decode(&v); err != nil || (fd.Kind() != protoreflect.Int64Kind && (v < math.MinInt32 || v > math.MaxInt32)) {
			return nil, p.errorf(n, "%s: %s is out of range", path, n.Value)
		}
		return v, nil
	case protoreflect.BoolKind:
		if n.Tag != "!!bool" {
			return nil, p.errorf(n, "%s: want true or false, got %s", path, describe(n))
		}
		return n.Value == "true", nil
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		var f float64
		if (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
			return nil, p.errorf(n, "%s: want a number, got %s", path, describe(n))
		}
		return f, nil
	}
	return n.Value, nil
}

func orWhat(path, what string) string {
	if path == "" {
		return what
	}
	return path
}
