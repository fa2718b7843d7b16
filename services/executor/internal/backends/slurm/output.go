package slurm

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

const (
	// inlineLimit: streams shorter than this travel inline in CompleteTask;
	// otherwise the result goes to the object store, as on an agent
	// (docs/executor.md#how-a-task-runs).
	inlineLimit = 64 << 10
	// tailBytes of each stream still travel inline with a large result.
	tailBytes = 32 << 10
)

// stream is one output file as read after the job ended.
type stream struct {
	head      []byte // the first limit bytes
	tail      []byte // the last tailBytes
	size      int64  // the whole file
	truncated int64  // bytes beyond head that are not in head
}

// readStream reads a batch job's output file, keeping at most limit bytes
// from its start and tailBytes from its end. A missing file is empty: the
// job may have printed nothing.
func readStream(path string, limit int64) stream {
	f, err := os.Open(path)
	if err != nil {
		return stream{}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return stream{}
	}
	s := stream{size: st.Size()}
	s.head, _ = io.ReadAll(io.LimitReader(f, limit))
	s.truncated = max(s.size-int64(len(s.head)), 0)
	off := max(s.size-tailBytes, 0)
	buf := make([]byte, s.size-off)
	n, _ := f.ReadAt(buf, off)
	s.tail = buf[:n]
	return s
}

// batchOutput is what CompleteTask carries of a batch job's output, and
// the result object when the output is too large to carry.
type batchOutput struct {
	stdout, stderr string
	// object is the JSON result object, nil when the output is inline.
	object []byte
}

// collectOutput reads both files: small output travels whole; otherwise
// the object {"stdout","stderr","stdout_truncated_bytes",
// "stderr_truncated_bytes"} is uploaded and the tails travel inline, the
// shape an agent's result has.
func collectOutput(stdoutPath, stderrPath string, limit int64) batchOutput {
	so, se := readStream(stdoutPath, limit), readStream(stderrPath, limit)
	if so.size < inlineLimit && se.size < inlineLimit {
		out, errOut := inlineText(so.head), inlineText(se.head)
		if len(out) <= inlineLimit && len(errOut) <= inlineLimit {
			return batchOutput{stdout: out, stderr: errOut}
		}
	}
	object, _ := json.Marshal(map[string]any{
		"stdout": validUTF8(so.head), "stderr": validUTF8(se.head),
		"stdout_truncated_bytes": so.truncated, "stderr_truncated_bytes": se.truncated,
	})
	return batchOutput{stdout: tailUTF8(so.tail, tailBytes), stderr: tailUTF8(se.tail, tailBytes), object: object}
}

func validUTF8(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// inlineText is b as CompleteTask may carry it: valid UTF-8 without NUL
// (the API refuses a NUL in any string), each replaced by U+FFFD.
func inlineText(b []byte) string {
	return strings.ReplaceAll(validUTF8(b), "\x00", "\uFFFD")
}

// tailUTF8 is b as inline text, at most n bytes, starting on a character.
func tailUTF8(b []byte, n int) string {
	s := inlineText(b)
	for len(s) > n {
		_, size := utf8.DecodeRuneInString(s)
		s = s[size:]
	}
	return s
}

// progressTail follows a running batch job's output for progress: new
// complete lines of stdout that start with "::progress::", and the last
// line of its progress file, as an agent's shim reads them.
type progressTail struct {
	stdoutPath, progressPath string
	offset                   int64
	partial                  []byte
	fileStamp                string
}

// maxProgressRead bounds what one poll reads of a chatty job's stdout.
const maxProgressRead = 4 << 20

// poll returns the newest progress reported since the last poll.
func (p *progressTail) poll() (value int, msg string, ok bool) {
	if f, err := os.Open(p.stdoutPath); err == nil {
		if st, err := f.Stat(); err == nil && st.Size() > p.offset {
			n := min(st.Size()-p.offset, maxProgressRead)
			buf := make([]byte, n)
			read, _ := f.ReadAt(buf, p.offset)
			p.offset += int64(read)
			data := append(p.partial, buf[:read]...)
			last := strings.LastIndexByte(string(data), '\n')
			if last < 0 {
				p.partial = data
				if len(p.partial) > 64<<10 {
					p.partial = nil // no progress line is that long
				}
			} else {
				p.partial = append([]byte(nil), data[last+1:]...)
				sc := bufio.NewScanner(strings.NewReader(string(data[:last+1])))
				sc.Buffer(make([]byte, 64<<10), 1<<20)
				for sc.Scan() {
					rest, found := strings.CutPrefix(strings.TrimRight(sc.Text(), "\r"), shim.ProgressPrefix)
					if !found {
						continue
					}
					if v, m, good := shim.ParseProgress(rest); good {
						value, msg, ok = v, m, true
					}
				}
			}
		}
		f.Close()
	}
	if st, err := os.Stat(p.progressPath); err == nil {
		stamp := st.ModTime().String() + "/" + itoa(int(st.Size()))
		if stamp != p.fileStamp {
			p.fileStamp = stamp
			if raw, err := os.ReadFile(p.progressPath); err == nil {
				lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
				if v, m, good := shim.ParseProgress(lines[len(lines)-1]); good {
					value, msg, ok = v, m, true
				}
			}
		}
	}
	return value, msg, ok
}
