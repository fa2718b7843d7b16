package kafkatest

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// KcatRecord is one record as kcat read it. Key and Value are nil for a NULL
// key or value and empty (non-nil) for an empty one.
type KcatRecord struct {
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   map[string]string // last value wins for repeated names; nil when none
}

// binaryFormat frames each record so that arbitrary key and value bytes
// survive: a text line "partition offset keylen valuelen" (lengths are -1
// for NULL) followed by exactly that many raw key and value bytes and a
// newline. kcat 1.7's JSON output (-J) writes invalid UTF-8 raw into JSON
// strings and %h prints headers as unescaped n=v CSV (a tracestate such as
// "a=1,b=2" is ambiguous), so neither carries protobuf values or W3C headers
// faithfully; lengths do.
const binaryFormat = `%p %o %K %S\n%k%s\n`

// ConsumeAll reads every record of topic from the beginning with kcat, with
// isolation.level=read_committed (records of open or aborted transactions
// are left out), and returns them ordered by partition and offset.
//
// It runs kcat twice: once with binaryFormat for partition, offset, key and
// value, then with -J for headers only (text, which JSON carries well). The
// second run starts later, so it sees at least the records of the first;
// records the first run did not see are ignored. The topic must exist.
func (b *Broker) ConsumeAll(t testing.TB, topic string) []KcatRecord {
	t.Helper()
	common := []string{"-C", "-t", topic, "-o", "beginning", "-e", "-q", "-X", "isolation.level=read_committed"}
	recs, err := parseBinary(b.Kcat(t, append(common, "-f", binaryFormat)...))
	if err != nil {
		t.Fatalf("kafkatest: parse kcat output for topic %s: %v", topic, err)
	}
	headers, err := parseJSONHeaders(b.Kcat(t, append(common, "-J")...))
	if err != nil {
		t.Fatalf("kafkatest: parse kcat JSON output for topic %s: %v", topic, err)
	}
	for i := range recs {
		h, ok := headers[position{recs[i].Partition, recs[i].Offset}]
		if !ok {
			t.Fatalf("kafkatest: kcat JSON run missed %s[%d]@%d that the binary run returned",
				topic, recs[i].Partition, recs[i].Offset)
		}
		recs[i].Headers = h
	}
	slices.SortFunc(recs, func(a, b KcatRecord) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	return recs
}

type position struct {
	partition int32
	offset    int64
}

// parseBinary decodes binaryFormat output.
func parseBinary(out []byte) ([]KcatRecord, error) {
	r := bufio.NewReader(bytes.NewReader(out))
	var recs []KcatRecord
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF && line == "" {
			return recs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("record %d: truncated header line %q", len(recs), line)
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("record %d: malformed header line %q", len(recs), line)
		}
		var nums [4]int64
		for i, s := range f {
			if nums[i], err = strconv.ParseInt(s, 10, 64); err != nil {
				return nil, fmt.Errorf("record %d: header line %q: %w", len(recs), line, err)
			}
		}
		rec := KcatRecord{Partition: int32(nums[0]), Offset: nums[1]}
		if rec.Key, err = readN(r, nums[2]); err != nil {
			return nil, fmt.Errorf("record %d key: %w", len(recs), err)
		}
		if rec.Value, err = readN(r, nums[3]); err != nil {
			return nil, fmt.Errorf("record %d value: %w", len(recs), err)
		}
		if c, err := r.ReadByte(); err != nil || c != '\n' {
			return nil, fmt.Errorf("record %d: missing record terminator", len(recs))
		}
		recs = append(recs, rec)
	}
}

// readN reads n bytes; n == -1 is NULL (nil), n == 0 is empty (non-nil).
func readN(r io.Reader, n int64) ([]byte, error) {
	if n == -1 {
		return nil, nil
	}
	if n < 0 {
		return nil, fmt.Errorf("invalid length %d", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// parseJSONHeaders decodes -J output. kcat 1.7 writes headers as a flat
// array [name, value, name, value, ...] with null for a NULL value (its -h
// text shows a map, the code writes the array).
func parseJSONHeaders(out []byte) (map[position]map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(out))
	res := make(map[position]map[string]string)
	for {
		var msg struct {
			Partition int32     `json:"partition"`
			Offset    int64     `json:"offset"`
			Headers   []*string `json:"headers"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return res, nil
			}
			return nil, err
		}
		if len(msg.Headers)%2 != 0 {
			return nil, fmt.Errorf("partition %d offset %d: odd header array length %d", msg.Partition, msg.Offset, len(msg.Headers))
		}
		var h map[string]string
		for i := 0; i < len(msg.Headers); i += 2 {
			if msg.Headers[i] == nil {
				return nil, fmt.Errorf("partition %d offset %d: null header name", msg.Partition, msg.Offset)
			}
			if h == nil {
				h = make(map[string]string)
			}
			v := ""
			if msg.Headers[i+1] != nil {
				v = *msg.Headers[i+1]
			}
			h[*msg.Headers[i]] = v
		}
		res[position{msg.Partition, msg.Offset}] = h
	}
}
