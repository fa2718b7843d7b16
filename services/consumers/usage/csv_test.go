package usage

import (
	"strings"
	"testing"

	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
)

func TestWriteCSV(t *testing.T) {
	var b strings.Builder
	err := WriteCSV(&b, &usagev1.GetUsageResponse{Currency: "USD",
		Rows: []*usagev1.UsageRow{{Key: "2026-11-22", GpuSeconds: 120, CpuSeconds: 1.5, Items: 3, Amount: 0.0961},
			{Key: "a,b", VideoSeconds: 5, Items: 1, Amount: 0.25},
			{Key: "bie", StageSeconds: 0.213128, Items: 1, Amount: 0.000000426256}},
		Total: &usagev1.UsageRow{Key: "total", GpuSeconds: 120, CpuSeconds: 1.5, VideoSeconds: 5, StageSeconds: 0.213128, Items: 5, Amount: 0.346100426256}})
	// The amounts as the report holds them, to 1e-12 as JSON shows them.
	want := "key,gpu_seconds,cpu_seconds,video_seconds,stage_seconds,items,amount,currency\n" +
		"2026-11-22,120,1.5,0,0,3,0.0961,USD\n" +
		"\"a,b\",0,0,5,0,1,0.25,USD\n" +
		"bie,0,0,0,0.213128,1,0.000000426256,USD\n" +
		"total,120,1.5,5,0.213128,5,0.346100426256,USD\n"
	if err != nil || b.String() != want {
		t.Errorf("csv =\n%s\nwant\n%s (%v)", b.String(), want, err)
	}
}
