package cmdline

import (
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tt := range []struct {
		line string
		want []string
	}{
		{"python process.py --shard=1", []string{"python", "process.py", "--shard=1"}},
		{"  wget\thttp://example.com/a?b=1 \n", []string{"wget", "http://example.com/a?b=1"}},
		{`echo 'a  b' "c  d" e\ f`, []string{"echo", "a  b", "c  d", "e f"}},
		{`echo 'it''s' "say \"hi\"" "a\nb" 'x\y'`, []string{"echo", "its", `say "hi"`, `a\nb`, `x\y`}},
		{`printf "%s|%s" '$HOME' "\$PATH" '; rm -rf /'`, []string{"printf", "%s|%s", "$HOME", "$PATH", "; rm -rf /"}},
		{`cmd "" ''`, []string{"cmd", "", ""}},
		{"ls *.txt ~/data", []string{"ls", "*.txt", "~/data"}},
		{"a\\\nb", []string{"ab"}},
		{"python train.py\n", []string{"python", "train.py"}},
		{"\n  echo hi  \n\n", []string{"echo", "hi"}},
		{"echo 'two\nlines'", []string{"echo", "two\nlines"}},
		{"名前 训练 --epochs=100", []string{"名前", "训练", "--epochs=100"}},
		{"   ", nil},
	} {
		got, err := Split(tt.line)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
}

// Every way a line can be unreadable, and shell syntax outside quotes, is
// an error naming what and where.
func TestSplitRefuses(t *testing.T) {
	for line, says := range map[string]string{
		`echo 'open`:           "single quote at character 6",
		`echo "open`:           "double quote at character 6",
		`echo trailing\`:       "ends in a backslash",
		"echo a | wc -l":       `'|' at character 8 is shell syntax`,
		"echo a > out.txt":     `'>' at character 8`,
		"make && make install": `'&' at character 6`,
		"echo a; echo b":       `';' at character 7`,
		"echo $HOME":           `'$' at character 6`,
		"echo `date`":          "'`' at character 6",
		"(cd x)":               `'(' at character 1`,
		"echo a\necho b":       "line break at character 7",
	} {
		_, err := Split(line)
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Split(%q) error = %v, want one saying %q", line, err, says)
		}
	}
}

func TestResolve(t *testing.T) {
	for _, tt := range []struct {
		command  string
		args     []string
		wantCmd  string
		wantArgs []string
	}{
		// Arguments given: the command is the program, whatever it holds.
		{"/opt/My App/run", []string{"--x"}, "/opt/My App/run", []string{"--x"}},
		{"echo", []string{"a b"}, "echo", []string{"a b"}},
		// No arguments: the command is a command line.
		{"echo hello world", nil, "echo", []string{"hello", "world"}},
		{"echo hello world", []string{}, "echo", []string{"hello", "world"}},
		{"'/opt/My App/run'", nil, "/opt/My App/run", nil},
		{"true", nil, "true", nil},
		{"  true  ", nil, "true", nil},
		{"   ", nil, "", nil},
	} {
		cmd, args, err := Resolve(tt.command, tt.args)
		if err != nil || cmd != tt.wantCmd || !slices.Equal(args, tt.wantArgs) {
			t.Errorf("Resolve(%q, %q) = %q, %q, %v; want %q, %q", tt.command, tt.args, cmd, args, err, tt.wantCmd, tt.wantArgs)
		}
	}
	if _, _, err := Resolve("echo a | wc", nil); err == nil {
		t.Error("Resolve of a pipe without args: no error")
	}
	if cmd, args, err := Resolve("weird|name", []string{"x"}); err != nil || cmd != "weird|name" || len(args) != 1 {
		t.Errorf("a command with args is never read as a line: %q %q %v", cmd, args, err)
	}
}

// A shell builtin cannot be started without a shell: as a command line,
// as a one-word command or as the program of explicit args, it is refused
// naming the builtin and type script. The same name as a path, or a
// builtin that systems also ship as a program, is a program.
func TestResolveRefusesShellBuiltins(t *testing.T) {
	for _, tt := range []struct {
		command string
		args    []string
	}{
		{"exit 1", nil}, {"exit", nil}, {"exit", []string{"1"}}, {"  cd /tmp ", nil}, {"export A=1", nil},
		{"source env.sh", nil}, {". ./env.sh", nil}, {"set -e", nil}, {"'exit' 3", nil}, {":", nil},
	} {
		_, _, err := Resolve(tt.command, tt.args)
		if err == nil || !strings.Contains(err.Error(), "shell builtin") || !strings.Contains(err.Error(), "type script") {
			t.Errorf("Resolve(%q, %q) = %v; want a shell builtin refused", tt.command, tt.args, err)
		}
	}
	for _, command := range []string{"./exit", "/usr/local/bin/cd", "echo hi", "test -f x", "kill -0 1", "exiting now", "true"} {
		if _, _, err := Resolve(command, nil); err != nil {
			t.Errorf("Resolve(%q) = %v; want it run as a program", command, err)
		}
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"python a.py --x=1", `echo 'a b' "c\"d" e\ f`, "", `"`, `\`, "a|b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		words, err := Split(line)
		if err != nil {
			return
		}
		// Quoting every word back gives a line that splits the same.
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + strings.ReplaceAll(w, "'", `'"'"'`) + "'"
		}
		again, err := Split(strings.Join(quoted, " "))
		if err != nil || !slices.Equal(again, words) {
			t.Fatalf("Split(%q) = %q; requoted it splits as %q, %v", line, words, again, err)
		}
	})
}
