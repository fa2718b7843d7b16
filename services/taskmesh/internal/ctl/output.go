package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Output formats of -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// protoJSON is the machine format: proto field names, as in task files and
// the REST API (docs/api/README.md#json), rather than protojson's
// lowerCamelCase.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true}

// marshalProto returns m as JSON, re-spaced by encoding/json: protojson
// varies its whitespace on purpose, and the CLI's output should be the same
// from run to run for diffs and scripts.
func marshalProto(m proto.Message, indent bool) ([]byte, error) {
	opts := protoJSON
	if strings.HasPrefix(string(m.ProtoReflect().Descriptor().FullName()), "taskmesh.video.") {
		// The video API's documented keys are its JSON names (requestId
		// beside request_id, …), as its REST answers show them.
		opts.UseProtoNames = false
	}
	b, err := opts.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if indent {
		err = json.Indent(&out, b, "", "  ")
	} else {
		err = json.Compact(&out, b)
	}
	return out.Bytes(), err
}

// writeProto prints m as indented JSON or as YAML.
func writeProto(w io.Writer, format string, m proto.Message) error {
	b, err := marshalProto(m, true)
	if err != nil {
		return err
	}
	if format == formatYAML {
		return writeYAMLFromJSON(w, b)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// writeProtoLine prints m as one compact JSON line (for streams), or as one
// YAML document starting with ---.
func writeProtoLine(w io.Writer, format string, m proto.Message) error {
	b, err := marshalProto(m, false)
	if err != nil {
		return err
	}
	if format == formatYAML {
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
		return writeYAMLFromJSON(w, b)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// writeYAMLFromJSON re-emits JSON as block YAML. Going through yaml.Node
// keeps the field order of the JSON (a map would sort it); clearing the
// styles turns JSON's flow style and quoting into plain block YAML.
func writeYAMLFromJSON(w io.Writer, b []byte) error {
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return err
	}
	plain(&n)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	return enc.Close()
}

func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}

// writeValue prints a plain Go value (not a proto) as JSON or YAML; its
// fields carry both json and yaml tags.
func writeValue(w io.Writer, format string, v any) error {
	if format == formatJSON {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return enc.Close()
}

// writeValueLine prints v as one compact JSON line, or as one YAML
// document starting with --- (as writeProtoLine does for protos).
func writeValueLine(w io.Writer, format string, v any) error {
	if format == formatJSON {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if _, err := io.WriteString(w, "---\n"); err != nil {
		return err
	}
	return writeValue(w, format, v)
}

// timeText shows a timestamp in UTC, second precision, or "" if unset.
func timeText(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// isTerminal reports whether w is a character device (a terminal), where
// a live progress bar makes sense; files and pipes get plain lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// quoteArg shows a command-line argument so that spaces stay visible.
func quoteArg(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\$`") {
		return s
	}
	return fmt.Sprintf("%q", s)
}

// counted is n with its noun, singular for one: "1 task", "3 tasks".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// orDash fills empty table cells so columns stay aligned for readers and
// awk alike.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
