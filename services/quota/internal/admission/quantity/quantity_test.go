package quantity

import (
	"errors"
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
	}
	for _, tt := range tests {
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
