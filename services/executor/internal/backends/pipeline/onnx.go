package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// A protobuf wire reader for the parts of onnx.proto the stand-in ONNX
// stage reads: ModelProto's top-level fields and GraphProto's name, nodes,
// inputs and outputs. It checks the wire format strictly (tags, wire
// types, lengths), which is what tells an ONNX model from any other file.

// field is one top-level field of a message as found on the wire.
type field struct {
	num  int
	wire int
	// raw is the field's whole encoding, tag included, so a normaliser can
	// write it back unchanged.
	raw []byte
	// value is the varint, or the payload of a length-delimited field.
	varint  uint64
	payload []byte
}

// errTruncated: the message ends inside a field.
var errTruncated = errors.New("it ends in the middle of a field")

// fields splits a protobuf message into its top-level fields.
func fields(b []byte) ([]field, error) {
	var out []field
	for pos := 0; pos < len(b); {
		start := pos
		tag, n := binary.Uvarint(b[pos:])
		if n <= 0 {
			return nil, fmt.Errorf("bad field tag at byte %d", pos)
		}
		pos += n
		f := field{num: int(tag >> 3), wire: int(tag & 7)}
		if f.num == 0 {
			return nil, fmt.Errorf("field number 0 at byte %d", start)
		}
		switch f.wire {
		case 0:
			v, n := binary.Uvarint(b[pos:])
			if n <= 0 {
				return nil, fmt.Errorf("field %d at byte %d: %w", f.num, start, errTruncated)
			}
			f.varint, pos = v, pos+n
		case 1:
			if pos+8 > len(b) {
				return nil, fmt.Errorf("field %d at byte %d: %w", f.num, start, errTruncated)
			}
			pos += 8
		case 5:
			if pos+4 > len(b) {
				return nil, fmt.Errorf("field %d at byte %d: %w", f.num, start, errTruncated)
			}
			pos += 4
		case 2:
			l, n := binary.Uvarint(b[pos:])
			if n <= 0 || l > uint64(len(b)-pos-n) {
				return nil, fmt.Errorf("field %d at byte %d: %w", f.num, start, errTruncated)
			}
			pos += n
			f.payload, pos = b[pos:pos+int(l)], pos+int(l)
		default:
			return nil, fmt.Errorf("field %d at byte %d has wire type %d, which protobuf does not have", f.num, start, f.wire)
		}
		f.raw = b[start:pos]
		out = append(out, f)
	}
	return out, nil
}

// ModelProto's fields and the wire types onnx.proto gives them.
var modelFields = map[int]int{1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}

// Model is what the stand-in reads of an ONNX model.
type Model struct {
	IRVersion       uint64
	Producer        string
	Opsets          int
	Graph           string
	Nodes           int
	Inputs, Outputs []string
}

// parseModel reads an ONNX ModelProto; its errors say why b is not one.
func parseModel(b []byte) (Model, []field, error) {
	fs, err := fields(b)
	if err != nil {
		return Model{}, nil, err
	}
	var m Model
	var graph []byte
	for _, f := range fs {
		want, known := modelFields[f.num]
		if known && want != f.wire {
			return Model{}, nil, fmt.Errorf("ModelProto field %d has wire type %d, not %d", f.num, f.wire, want)
		}
		switch f.num {
		case 1:
			m.IRVersion = f.varint
		case 2:
			m.Producer = string(f.payload)
		case 7:
			graph = f.payload
		case 8:
			m.Opsets++
		}
	}
	switch {
	case m.IRVersion == 0:
		return Model{}, nil, errors.New("it has no ir_version (ModelProto field 1)")
	case graph == nil:
		return Model{}, nil, errors.New("it has no graph (ModelProto field 7)")
	}
	gs, err := fields(graph)
	if err != nil {
		return Model{}, nil, fmt.Errorf("its graph: %w", err)
	}
	for _, f := range gs {
		switch {
		case f.num == 1 && f.wire == 2:
			m.Nodes++
		case f.num == 2 && f.wire == 2:
			m.Graph = string(f.payload)
		case (f.num == 11 || f.num == 12) && f.wire == 2:
			name := valueInfoName(f.payload)
			if f.num == 11 {
				m.Inputs = append(m.Inputs, name)
			} else {
				m.Outputs = append(m.Outputs, name)
			}
		}
	}
	return m, fs, nil
}

// valueInfoName is ValueInfoProto.name (field 1).
func valueInfoName(b []byte) string {
	fs, err := fields(b)
	if err != nil {
		return ""
	}
	for _, f := range fs {
		if f.num == 1 && f.wire == 2 {
			return string(f.payload)
		}
	}
	return ""
}

// normalise writes a model's top-level fields in field-number order
// (repeated fields keep their order) without its doc_string (field 6):
// two exports of the same model that differ only in field order or
// documentation normalise to the same bytes.
func normalise(fs []field) []byte {
	sorted := slices.Clone(fs)
	slices.SortStableFunc(sorted, func(a, b field) int { return a.num - b.num })
	var out []byte
	for _, f := range sorted {
		if f.num == 6 {
			continue
		}
		out = append(out, f.raw...)
	}
	return out
}
