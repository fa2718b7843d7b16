package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/taskmesh/taskmesh/platform/domain/textcut"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

const (
	// inlineLimit: a stream shorter than this is sent inline in
	// CompleteTask (small results are stored with the task); otherwise the
	// result goes to the object store (docs/executor.md#how-a-task-runs).
	inlineLimit = 64 << 10
	// tailBytes of each stream are still sent inline with a large result.
	tailBytes = 32 << 10
)

type output struct {
	stdout, stderr string
	large          bool
}

// collectOutput reads what CompleteTask carries inline: the whole streams
// when both are small, otherwise their last tailBytes.
func collectOutput(runDir string, st shim.Status) output {
	if st.StdoutBytes < inlineLimit && st.StderrBytes < inlineLimit {
		so := sanitize(readFile(filepath.Join(runDir, shim.StdoutFile)))
		se := sanitize(readFile(filepath.Join(runDir, shim.StderrFile)))
		// Replacing invalid bytes can make a string longer; it must still
		// fit the API's inline limit.
		if len(so) <= inlineLimit && len(se) <= inlineLimit {
			return output{stdout: so, stderr: se}
		}
	}
	return output{
		stdout: tailUTF8(streamTail(runDir, shim.StdoutFile, shim.StdoutTail), tailBytes),
		stderr: tailUTF8(streamTail(runDir, shim.StderrFile, shim.StderrTail), tailBytes),
		large:  true,
	}
}

func readFile(p string) []byte {
	b, _ := os.ReadFile(p)
	return b
}

// streamTail is a stream's last bytes: its tail file when the shim wrote
// one (the output limit cut the stream), else the end of the stream's own
// file, which then holds all of it.
func streamTail(runDir, file, tail string) []byte {
	if b, err := os.ReadFile(filepath.Join(runDir, tail)); err == nil {
		return b
	}
	return readLast(filepath.Join(runDir, file), tailBytes+utf8.UTFMax)
}

// readLast reads at most the last n bytes of the file at p (nothing when
// it cannot be read).
func readLast(p string, n int64) []byte {
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(0, info.Size()-n)
	b := make([]byte, info.Size()-off)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}

// sanitize makes b a string the API accepts: valid UTF-8 (protobuf
// strings must be) without NUL (the gateway refuses a request with a NUL
// in any string, docs/api/README.md#bad-input), replacing invalid bytes
// and NULs with U+FFFD. A NUL sent as is would have the outcome refused.
func sanitize(b []byte) string {
	return noNUL(validUTF8(b))
}

// validUTF8 replaces b's invalid bytes with U+FFFD. The result object
// uploaded for a large output is JSON, which carries a NUL as \u0000, so
// it keeps them.
func validUTF8(b []byte) string {
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// noNUL replaces every NUL of s with U+FFFD.
func noNUL(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// tailUTF8 returns the valid UTF-8 form of b's last bytes, at most n bytes
// long and starting on a character boundary.
func tailUTF8(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	s := sanitize(b)
	for len(s) > n {
		_, size := utf8.DecodeRuneInString(s)
		s = s[size:]
	}
	return s
}

// truncateUTF8 cuts s to at most n bytes on a character boundary, with
// NUL bytes (which Postgres text refuses) replaced.
func truncateUTF8(s string, n int) string { return textcut.Bytes(noNUL(s), n) }

// resultBody is the JSON object uploaded for a large result.
type resultBody struct {
	Stdout               string `json:"stdout"`
	Stderr               string `json:"stderr"`
	StdoutTruncatedBytes int64  `json:"stdout_truncated_bytes"`
	StderrTruncatedBytes int64  `json:"stderr_truncated_bytes"`
}

// buildResultBody reads the kept output of a run directory.
func buildResultBody(runDir string, stdoutDropped, stderrDropped int64) ([]byte, error) {
	return json.Marshal(resultBody{
		Stdout:               validUTF8(readFile(filepath.Join(runDir, shim.StdoutFile))),
		Stderr:               validUTF8(readFile(filepath.Join(runDir, shim.StderrFile))),
		StdoutTruncatedBytes: stdoutDropped,
		StderrTruncatedBytes: stderrDropped,
	})
}
