package grpcserver

import (
	"strings"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/agent/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/event/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	_ "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
)

// Every string pattern a Taskmesh message declares (on a field, a list's
// items, a map's keys or values) has its words, so no caller is answered
// with a regular expression.
func TestEveryPatternHasWords(t *testing.T) {
	used := map[string]bool{}
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(f.Package()), "taskmesh.") {
			return true
		}
		var walk func(protoreflect.MessageDescriptors)
		walk = func(msgs protoreflect.MessageDescriptors) {
			for i := 0; i < msgs.Len(); i++ {
				m := msgs.Get(i)
				walk(m.Messages())
				for j := 0; j < m.Fields().Len(); j++ {
					field := m.Fields().Get(j)
					rules, _ := proto.GetExtension(field.Options(), validate.E_Field).(*validate.FieldRules)
					for _, r := range []*validate.FieldRules{rules, rules.GetRepeated().GetItems(),
						rules.GetMap().GetKeys(), rules.GetMap().GetValues()} {
						p := r.GetString().GetPattern()
						if p == "" {
							continue
						}
						used[p] = true
						if _, ok := patternInWords[p]; !ok {
							t.Errorf("%s: pattern %q has no words in patternInWords", field.FullName(), p)
						}
					}
				}
			}
		}
		walk(f.Messages())
		return true
	})
	if len(used) < 10 {
		t.Fatalf("found %d patterns; the walk misses the registered messages", len(used))
	}
	// And no entry outlives its pattern.
	for p := range patternInWords {
		if !used[p] {
			t.Errorf("patternInWords has %q, which no field declares", p)
		}
	}
}

// A value outside its field's list is told the values it may take, the
// empty one as "left out"; one outside its pattern what the field accepts.
// Other messages, and rules without words, stay as protovalidate words
// them.
func TestRulesInWords(t *testing.T) {
	for msg, want := range map[string]string{
		"must be in list [, always, on-failure, never]":             "must be always, on-failure or never (or left out)",
		"must be in list [json, csv]":                               "must be json or csv",
		"must be in list [only]":                                    "must be only",
		"must be in list []":                                        "must be in list []",
		"does not match regex pattern `^[a-z0-9][a-z0-9_-]{0,62}$`": "must be 1 to 63 lower-case letters, digits, '_' or '-', starting with a letter or digit",
		"does not match regex pattern `^([0-9a-f]{64})?$`":          "must be 64 lower-case hexadecimal digits, a SHA-256 (or left out)",
		"does not match regex pattern `^x+$`":                       "does not match regex pattern `^x+$`",
		"must be at most 10 characters":                             "must be at most 10 characters",
	} {
		if got, _ := inWords(msg); got != want {
			t.Errorf("%q → %q, want %q", msg, got, want)
		}
	}
}
