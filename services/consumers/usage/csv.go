// Package usage is the public side of usage metering that other modules
// share: the CSV form of a usage report, which the gateway answers to
// `Accept: text/csv` and `taskmesh ctl usage --csv` prints.
package usage

import (
	"encoding/csv"
	"io"
	"strconv"

	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
)

// CSVHeader is the first line of a report's CSV.
var CSVHeader = []string{"key", "gpu_seconds", "cpu_seconds", "video_seconds", "stage_seconds", "items", "amount", "currency"}

// WriteCSV writes r as CSV: a header, a line per row, and the total
// (key "total").
func WriteCSV(w io.Writer, r *usagev1.GetUsageResponse) error {
	cw := csv.NewWriter(w)
	// Every number as the report holds it (seconds to the microsecond,
	// amounts to 1e-12, rounded where the report is made), in the shortest
	// decimal that reads back as the same number: the CSV says what the
	// JSON says, with no second rounding of its own.
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	line := func(row *usagev1.UsageRow) []string {
		return []string{row.GetKey(), f(row.GetGpuSeconds()), f(row.GetCpuSeconds()), f(row.GetVideoSeconds()),
			f(row.GetStageSeconds()), strconv.FormatInt(row.GetItems(), 10), f(row.GetAmount()), r.GetCurrency()}
	}
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, row := range r.GetRows() {
		if err := cw.Write(line(row)); err != nil {
			return err
		}
	}
	if r.GetTotal() != nil {
		if err := cw.Write(line(r.GetTotal())); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
