package domain

import (
	"bytes"
	"fmt"
	"strings"
)

// Kind is what an upload is for.
type Kind string

// The upload kinds.
const (
	KindModel    Kind = "model"
	KindQuant    Kind = "quant"
	KindRefImage Kind = "ref_image"
)

// ParseKind reads an upload kind.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case KindModel, KindQuant, KindRefImage:
		return k, nil
	case "":
		return "", Invalid("kind", "is required: model, quant or ref_image")
	}
	return "", Invalid("kind", "must be model, quant or ref_image, not %q", s)
}

// SniffBytes is how much of an upload's start CheckStart needs.
const SniffBytes = 16

// CheckStart judges an upload by its first bytes (fewer only when the
// upload is shorter): a model must begin like an ONNX ModelProto, a quant
// archive like a zip, a reference image like a JPEG, PNG, BMP or WEBP (a
// GIF is refused by name, as the full decode would). The stages read the
// files in full and fail with their own reasons; this refuses an obviously
// wrong file before it is stored.
func (k Kind) CheckStart(head []byte) error {
	if len(head) == 0 {
		return Invalid("file", "is empty")
	}
	switch k {
	case KindModel:
		return checkModelStart(head)
	case KindQuant:
		if !bytes.HasPrefix(head, []byte("PK\x03\x04")) && !bytes.HasPrefix(head, []byte("PK\x05\x06")) {
			return Invalid("file", "is not a zip archive (a quant upload must be quant.zip)")
		}
	case KindRefImage:
		// A GIF is an image, only not one the stages take: saying so is
		// more use than "not an image", and matches what the decode says.
		if bytes.HasPrefix(head, []byte("GIF87a")) || bytes.HasPrefix(head, []byte("GIF89a")) {
			return UnacceptedImage("gif")
		}
		if ImageFormat(head) == "" {
			return Invalid("file", "is not a JPEG, PNG, BMP or WEBP image")
		}
	}
	return nil
}

// checkModelStart accepts a protobuf message whose first field is one of
// ModelProto's with the wire type it has in onnx.proto (ir_version 1
// varint, opset_import 8, producer_name 2, producer_version 3, domain 4,
// model_version 5 varint, doc_string 6, graph 7, metadata_props 14,
// training_info 20, functions 25, configuration 26): every ONNX exporter
// writes one of these first.
func checkModelStart(head []byte) error {
	tag, n := uvarint(head)
	if n <= 0 {
		return Invalid("file", "is not an ONNX model (no protobuf field at its start)")
	}
	field, wire := tag>>3, tag&7
	want := map[uint64]uint64{1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
	if w, ok := want[field]; !ok || w != wire {
		return Invalid("file", "is not an ONNX model (it does not start with a ModelProto field)")
	}
	return nil
}

// uvarint decodes a protobuf varint; n is 0 when head ends first and
// negative on overflow.
func uvarint(head []byte) (uint64, int) {
	var v uint64
	for i, b := range head {
		if i == 10 {
			return 0, -1
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// ImageFormat names the image format of head, "" for none of those
// accepted.
func ImageFormat(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte{0xFF, 0xD8, 0xFF}):
		return "jpeg"
	case bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n")):
		return "png"
	case bytes.HasPrefix(head, []byte("BM")):
		return "bmp"
	case len(head) >= 12 && bytes.HasPrefix(head, []byte("RIFF")) && string(head[8:12]) == "WEBP":
		return "webp"
	}
	return ""
}

// UnacceptedImage refuses a reference image that is a real image of a
// format the stages do not take.
func UnacceptedImage(format string) error {
	return Invalid("file", "is a %s image; a reference image is JPEG, PNG, BMP or WEBP", format)
}

// UploadName is the object name of an upload of kind k: model.onnx and
// quant.zip, as the job layout names them, and for a reference image its
// client's file name reduced to key-safe characters (at most 64).
func UploadName(k Kind, filename string) string {
	switch k {
	case KindModel:
		return "model.onnx"
	case KindQuant:
		return "quant.zip"
	}
	if i := strings.LastIndexAny(filename, `/\`); i >= 0 {
		filename = filename[i+1:]
	}
	var b strings.Builder
	for _, r := range filename {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := strings.Trim(strings.ReplaceAll(b.String(), "..", "_"), ".")
	if len(name) > 64 {
		name = name[len(name)-64:]
	}
	if name == "" {
		name = "image"
	}
	return name
}

// MaxRefImages bounds the reference images of one job.
const MaxRefImages = 32

// JobRequest is a create request as received.
type JobRequest struct {
	ModelKey, QuantKey string
	RefImageKeys       []string
}

// Check refuses a request that misses a key, names too many reference
// images or one twice.
func (r JobRequest) Check() error {
	switch {
	case strings.TrimSpace(r.ModelKey) == "":
		return Invalid("model_key", "is required")
	case strings.TrimSpace(r.QuantKey) == "":
		return Invalid("quant_key", "is required")
	case len(r.RefImageKeys) > MaxRefImages:
		return Invalid("ref_image_keys", "names %d images; at most %d", len(r.RefImageKeys), MaxRefImages)
	}
	seen := map[string]bool{}
	for i, k := range r.RefImageKeys {
		if strings.TrimSpace(k) == "" {
			return Invalid(fmt.Sprintf("ref_image_keys[%d]", i), "is empty")
		}
		if seen[k] {
			return Invalid(fmt.Sprintf("ref_image_keys[%d]", i), "names %q twice", k)
		}
		seen[k] = true
	}
	return nil
}
