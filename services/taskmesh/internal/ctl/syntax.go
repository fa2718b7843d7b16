package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// This file reads the documents of task, group and template files and
// reports syntax errors at the line and column the problem is on
// (docs/ctl.md#task-files).
//
// yaml.v3's own messages are off by one: a parser error names the 0-based
// line of the construct being parsed (or of the problem when that
// construct starts on the first line), and a scanner error the 1-based
// line where the scalar or token before the problem began, so a tab on
// line 7 after "name: x" on line 6 reads "line 6". The library keeps the
// exact marks (problem_mark, context_mark) in its parser state but does
// not export them, so they are read from the decoder after the failure;
// should a later version rename them, the message falls back to the
// library's own line.
//
// Files named *.json are JSON, checked strictly before they are read:
// YAML would accept trailing commas, comments and single quotes that
// every other JSON tool refuses.

// decodeDocuments calls fn with every document of a task, group or
// template file, in order.
func decodeDocuments(name string, data []byte, fn func(doc *yaml.Node) error) error {
	if isJSONFile(name) {
		if err := checkJSON(name, data); err != nil {
			return err
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return yamlSyntaxError(name, data, dec, err)
		}
		if err := checkAliases(name, &doc); err != nil {
			return err
		}
		if err := fn(&doc); err != nil {
			return err
		}
	}
}

// maxAliasNodes bounds the nodes that aliases add to a document once
// expanded (docs/ctl.md#task-files). yaml.v3 keeps an alias as one node
// pointing at its anchor, but the parsers read every alias as the whole
// node it names, so a list of m aliases of a task whose args are an alias
// of n values is read as m*n strings. An 18 KB task file built that way
// allocated 144 MB, a template file of that size (variables with aliased
// options) took seconds, and both grow with the square of the size.
// yaml.v3's own guard against this ("excessive aliasing") applies only
// when it decodes into Go values, not into the yaml.Nodes read here. A
// file without aliases is not limited: its size is its cost.
const maxAliasNodes = 100_000

// checkAliases refuses a document whose aliases expand it by more than
// maxAliasNodes nodes, or an alias inside the node it names (&a [*a]),
// which would expand without end. Anchors precede their aliases, so one
// walk in document order sizes every anchored node before it is used.
func checkAliases(name string, doc *yaml.Node) error {
	c := aliasCheck{file: name, sizes: map[*yaml.Node]int{}}
	_, err := c.size(doc)
	return err
}

type aliasCheck struct {
	file  string
	sizes map[*yaml.Node]int // expanded size of each anchored node; -1 while it is being sized
	extra int                // nodes the aliases add so far
}

// size is the number of nodes n holds with its aliases expanded, capped
// at maxAliasNodes+2 (already more than one alias may add) so that nested
// aliases cannot overflow it.
func (c *aliasCheck) size(n *yaml.Node) (int, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		s, seen := c.sizes[n.Alias]
		if seen && s < 0 {
			return 0, &FileError{File: c.file, Line: n.Line, Col: n.Column,
				Msg: fmt.Sprintf("alias *%s is inside the node it names, which would never end", n.Value)}
		}
		if !seen {
			var err error
			if s, err = c.size(n.Alias); err != nil {
				return 0, err
			}
		}
		if c.extra += s - 1; c.extra > maxAliasNodes {
			return 0, &FileError{File: c.file, Line: n.Line, Col: n.Column,
				Msg: fmt.Sprintf("aliases expand the document by more than %d nodes (the limit)", maxAliasNodes)}
		}
		return s, nil
	}
	if n.Anchor != "" {
		if s, seen := c.sizes[n]; seen && s >= 0 {
			return s, nil
		}
		c.sizes[n] = -1
	}
	total := 1
	for _, child := range n.Content {
		s, err := c.size(child)
		if err != nil {
			return 0, err
		}
		total = min(total+s, maxAliasNodes+2)
	}
	if n.Anchor != "" {
		c.sizes[n] = total
	}
	return total, nil
}

func isJSONFile(name string) bool { return strings.HasSuffix(strings.ToLower(name), ".json") }

// yamlSyntaxError places a decoding error of dec at the problem's line
// and column. A problem found at the end of the input (an unclosed
// bracket or quote) is placed where the unclosed construct begins: the
// end of the file is not where it needs fixing.
func yamlSyntaxError(name string, data []byte, dec *yaml.Decoder, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	st, ok := yamlParserState(dec)
	if !ok {
		return &FileError{File: name, Msg: msg}
	}
	if st.reader {
		line, col := position(data, st.offset)
		return &FileError{File: name, Line: line, Col: col, Msg: st.problem}
	}
	problem := st.problem
	if problem == "" {
		return &FileError{File: name, Msg: msg}
	}
	if st.problemMark.index >= len(bytes.TrimRight(data, " \t\r\n")) && st.context != "" {
		what := strings.TrimPrefix(strings.TrimPrefix(st.context, "while parsing "), "while scanning ")
		return &FileError{File: name, Line: st.contextMark.line + 1, Col: st.contextMark.column + 1,
			Msg: fmt.Sprintf("%s started here is not closed by the end of the file (%s)", what, problem)}
	}
	return &FileError{File: name, Line: st.problemMark.line + 1, Col: st.problemMark.column + 1, Msg: problem}
}

type yamlMark struct{ index, line, column int }

type yamlState struct {
	reader                   bool // a reader error (bad encoding): offset is set, not the marks
	offset                   int
	problem, context         string
	problemMark, contextMark yamlMark
}

// yamlParserState reads the failed parser's state from dec (see the top
// of the file for why); ok is false when its layout is not the one known.
func yamlParserState(dec *yaml.Decoder) (st yamlState, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	p := reflect.ValueOf(dec).Elem().FieldByName("parser")
	if !p.IsValid() || p.Kind() != reflect.Pointer || p.IsNil() {
		return st, false
	}
	y := p.Elem().FieldByName("parser")
	if !y.IsValid() || y.Kind() != reflect.Struct {
		return st, false
	}
	mark := func(name string) yamlMark {
		m := y.FieldByName(name)
		return yamlMark{index: int(m.FieldByName("index").Int()), line: int(m.FieldByName("line").Int()),
			column: int(m.FieldByName("column").Int())}
	}
	const yamlReaderError = 2 // yaml_READER_ERROR
	st.reader = y.FieldByName("error").Int() == yamlReaderError
	st.offset = int(y.FieldByName("problem_offset").Int())
	st.problem = y.FieldByName("problem").String()
	st.context = y.FieldByName("context").String()
	st.problemMark, st.contextMark = mark("problem_mark"), mark("context_mark")
	return st, true
}

// checkJSON refuses what is not strict JSON, at the line and column of
// the problem, with a hint for what YAML would have let through.
func checkJSON(name string, data []byte) error {
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if err == nil || !errors.As(err, &se) {
		return nil // a value JSON reads but Go cannot hold is YAML's to judge
	}
	at := int(se.Offset) - 1 // Offset counts the offending byte
	if at >= len(bytes.TrimRight(data, " \t\r\n")) || at < 0 {
		if open := unclosedJSON(data); open >= 0 {
			line, col := position(data, open)
			return &FileError{File: name, Line: line, Col: col,
				Msg: fmt.Sprintf("%q opened here is not closed by the end of the file", data[open])}
		}
		line, col := position(data, len(data))
		return &FileError{File: name, Line: line, Col: col, Msg: "unexpected end of the file"}
	}
	msg := se.Error()
	prev := bytes.TrimRight(data[:at], " \t\r\n")
	switch c := data[at]; {
	case (c == '}' || c == ']') && len(prev) > 0 && prev[len(prev)-1] == ',':
		line, col := position(data, len(prev)-1)
		return &FileError{File: name, Line: line, Col: col, Msg: fmt.Sprintf("trailing comma before %q (JSON allows none)", c)}
	case c == '/' || c == '#':
		msg += " (JSON has no comments)"
	case c == '\'':
		msg += " (JSON strings take double quotes)"
	}
	line, col := position(data, at)
	return &FileError{File: name, Line: line, Col: col, Msg: msg}
}

// unclosedJSON returns the offset of the innermost bracket still open at
// the end of data, or -1.
func unclosedJSON(data []byte) int {
	var open []int
	inString, escaped := false, false
	for i, c := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			open = append(open, i)
		case (c == '}' || c == ']') && len(open) > 0:
			open = open[:len(open)-1]
		}
	}
	if len(open) == 0 {
		return -1
	}
	return open[len(open)-1]
}

// position is the 1-based line and column (in characters) of a byte
// offset.
func position(data []byte, offset int) (line, col int) {
	offset = min(max(offset, 0), len(data))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return line, col
}
