// Package cmdline reads a task's command given as one command line — the
// form `command: "python process.py --shard=1"` with no `args` — as the
// argument vector it names (docs/api/tasks.md, "A command line"). No shell
// ever runs it: the line is only split into words the way a POSIX shell
// splits them, with its quoting rules, and nothing is expanded. Syntax a
// shell would act on (pipes, redirections, lists, substitutions) is refused
// rather than passed on as literal text, because the program would receive
// something other than what the line says.
//
// It is pure, and sits under platform/domain so that the domain packages
// of both the scheduler (tasks, templates, managed services) and the
// executor's local API apply the one rule.
package cmdline

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Resolve returns the argument vector a task runs: command and args as
// given when args are present, and otherwise command read as a command
// line (Split). A command that is one plain word comes back unchanged.
// A program that is a shell builtin (ShellBuiltin) is refused either way.
func Resolve(command string, args []string) (string, []string, error) {
	cmd, args, err := resolve(command, args)
	if err == nil && ShellBuiltin(cmd) {
		err = fmt.Errorf("%s is a shell builtin, not a program, and no shell runs the command: run a shell command line as type script", cmd)
	}
	return cmd, args, err
}

func resolve(command string, args []string) (string, []string, error) {
	if len(args) > 0 || !needsReading(command) {
		return command, args, nil
	}
	words, err := Split(command)
	if err != nil {
		return command, args, err
	}
	if len(words) == 0 {
		return "", nil, nil
	}
	if len(words) == 1 {
		return words[0], args, nil
	}
	return words[0], words[1:], nil
}

// shellBuiltins are the builtins that act on the shell running them (its
// directory, variables, options, traps, flow) and that no system ships as
// a program. Started without a shell, as a shell or python task is, such
// a command cannot run at all: `exit 1` would fail to start on every
// agent, after every retry, instead of exiting 1. Builtins that some
// systems also ship as programs (echo, test, kill, wait, command, type)
// are left to the agent's PATH.
var shellBuiltins = map[string]bool{
	".": true, ":": true, "break": true, "continue": true, "eval": true, "exec": true, "exit": true,
	"export": true, "readonly": true, "return": true, "set": true, "shift": true, "times": true,
	"trap": true, "unset": true, "cd": true, "pushd": true, "popd": true, "dirs": true, "alias": true,
	"unalias": true, "source": true, "declare": true, "typeset": true, "local": true, "let": true,
	"shopt": true, "umask": true, "ulimit": true,
}

// ShellBuiltin reports whether program, as a task names it, is a shell
// builtin that exists only inside a shell (shellBuiltins). A path, such as
// ./exit or /usr/local/bin/cd, names a file and is a program.
func ShellBuiltin(program string) bool {
	return shellBuiltins[program]
}

// needsReading reports whether command is anything but one plain word: a
// plain word splits into itself.
func needsReading(command string) bool {
	return strings.ContainsAny(command, blanks+"'\"\\"+shellSyntax)
}

// shellSyntax are the characters a shell acts on outside quotes: lists and
// pipes, redirections, subshells, substitutions and expansions of
// variables. Glob characters and ~ are left as literal text (a shell would
// pass them on too when nothing matches).
const shellSyntax = "|&;<>()`$"

// blanks separate words.
const blanks = " \t\r\n"

// Split splits line into words as a POSIX shell does before it expands
// anything: blanks separate words; '…' keeps everything literal; "…" keeps
// everything literal but \" \\ \$ \` and a backslash-newline; a backslash
// outside quotes keeps the next character literal (a backslash-newline is
// removed); an empty pair of quotes makes an empty word. A line break
// between words ends a command in a shell, so it is shell syntax here;
// blanks and line breaks before the first word and after the last are
// ignored (a YAML block scalar ends in one). An unterminated quote, a
// trailing backslash, or unquoted shell syntax is an error that says which.
func Split(line string) ([]string, error) {
	// Byte by byte: every character with a meaning here is ASCII, and no
	// byte of a multi-byte UTF-8 character is, so other text (and even
	// invalid UTF-8) passes through unchanged.
	var (
		words  []string
		cur    []byte
		inWord bool
	)
	at := func(i int) int { return utf8.RuneCountInString(line[:i]) + 1 }
	// The first and the last character that is not a blank: a line break
	// between them separates commands.
	first, last := len(line)-len(strings.TrimLeft(line, blanks)), len(strings.TrimRight(line, blanks))-1
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\n' && i > first && i < last:
			return nil, fmt.Errorf("the line break at character %d is shell syntax (it ends a command), and no shell runs the command: run a script as type script", at(i))
		case strings.IndexByte(blanks, c) >= 0:
			if inWord {
				words, cur, inWord = append(words, string(cur)), cur[:0], false
			}
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("the single quote at character %d is never closed", at(i))
			}
			cur, inWord, i = append(cur, line[i+1:i+1+j]...), true, i+1+j
		case c == '"':
			j := i + 1
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) && strings.IndexByte("\"\\$`\n", line[j+1]) >= 0 {
					if line[j+1] != '\n' {
						cur = append(cur, line[j+1])
					}
					j++
					continue
				}
				cur = append(cur, line[j])
			}
			if j == len(line) {
				return nil, fmt.Errorf("the double quote at character %d is never closed", at(i))
			}
			inWord, i = true, j
		case c == '\\':
			if i+1 == len(line) {
				return nil, fmt.Errorf("the line ends in a backslash")
			}
			if line[i+1] != '\n' {
				cur, inWord = append(cur, line[i+1]), true
			}
			i++
		case strings.IndexByte(shellSyntax, c) >= 0:
			return nil, fmt.Errorf("%q at character %d is shell syntax, and no shell runs the command: quote it, give the arguments in args, or run a shell command line as type script", c, at(i))
		default:
			cur, inWord = append(cur, c), true
		}
	}
	if inWord {
		words = append(words, string(cur))
	}
	return words, nil
}
