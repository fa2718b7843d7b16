package quantity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMilli(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "8", want: 8000},
		{in: "500m", want: 500},
		{in: "1.5", want: 1500},
		{in: ".5", want: 500},
		{in: "0.0001", want: 1}, // rounds up
		{in: "2k", want: 2_000_000},
		{in: "1Ki", want: 1_024_000},
		{in: "4Gi", want: 4 * 1024 * 1024 * 1024 * 1000},
		{in: "1M", want: 1_000_000_000},
		{in: "", wantErr: true},
		{in: "m", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "1e3", wantErr: true},
		{in: "abc", wantErr: true},
		{in: "1X", wantErr: true},
		{in: "99999999999999999999P", wantErr: true},
		{in: "1.", want: 1000},
		{in: "9223372036854775", want: 9223372036854775000},
		{in: "9223372036854776", wantErr: true}, // past int64 milli-units
		{in: "1e308", wantErr: true},
		{in: "NaN", wantErr: true},
		{in: "Inf", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "-1000000", wantErr: true},
		{in: "lots", wantErr: true},
		{in: "1/2", wantErr: true},
		{in: "0x10", wantErr: true},
		{in: "1_000", wantErr: true},
		{in: " 1", wantErr: true},
		{in: "0000000000000000000000000000001", want: 1000},
		{in: "00000000000000000000000000000001", want: 1000},
		{in: "000000000000000000000000000000001", wantErr: true}, // 33 characters
	}
	for _, tt := range tests {
		if err := Check(tt.in); (err != nil) != tt.wantErr {
			t.Errorf("Check(%q) = %v", tt.in, err)
		}
		got, err := Milli(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Milli(%q) = %d, %v; want ErrInvalid", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Milli(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for in, want := range map[int64]string{8000: "8", 500: "500m", 0: "0", 1500: "1500m"} {
		if got := Format(in); got != want {
			t.Errorf("Format(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestMilliMap(t *testing.T) {
	got, err := MilliMap(map[string]string{"nvidia.com/gpu": "2", "cpu": "500m"})
	if err != nil || got["nvidia.com/gpu"] != 2000 || got["cpu"] != 500 {
		t.Fatalf("MilliMap = %v, %v", got, err)
	}
	if _, err := MilliMap(map[string]string{"cpu": "lots"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MilliMap(bad) err = %v", err)
	}
}

func TestUnits(t *testing.T) {
	for in, want := range map[string]float64{"2": 2, "500m": 0.5, "1k": 1000, "1Gi": 1 << 30, "0": 0} {
		if got, err := Units(in); err != nil || got != want {
			t.Errorf("Units(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "1e308", "NaN"} {
		if got, err := Units(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("Units(%q) = %v, %v; want ErrInvalid", in, got, err)
		}
	}
}

// The protos spell the rule too (buf.validate patterns, checked at the
// edge before any Go code runs): every quantity pattern they hold is
// Pattern, and every field with it is bounded by MaxLen.
func TestProtosSpellTheRule(t *testing.T) {
	root := filepath.Join("..", "..", "..", "proto")
	want := `pattern: "` + strings.ReplaceAll(Pattern, `\`, `\\`) + `"`
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".proto") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			if !strings.Contains(line, "Ki|Mi|Gi") {
				continue
			}
			found++
			if strings.TrimSpace(line) != want {
				t.Errorf("%s:%d: %s, want %s", path, i+1, strings.TrimSpace(line), want)
			}
			if i == 0 || strings.TrimSpace(lines[i-1]) != fmt.Sprintf("max_len: %d", MaxLen) {
				t.Errorf("%s:%d: the quantity pattern does not follow max_len: %d", path, i+1, MaxLen)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no quantity pattern found in the protos")
	}
}
