package outbox

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The offsets a checkpoint stores never pass a record of the relay that
// lies ahead of the checkpoint's cursor.
func TestCheckpointOffsets(t *testing.T) {
	k := &published{
		last: map[int32]Position{0: {TxID: 10, EventID: 5}, 1: {TxID: 20, EventID: 9}},
		from: []int64{100, 200, 300, 400},
		end:  []int64{150, 250, 350, 450},
		next: make([]int64, 4),
	}
	tests := []struct {
		name   string
		cursor Position
		want   []int64
	}{
		// Records found at start in partitions 0 and 1 are ahead of the
		// cursor: those partitions keep the scan's start.
		{"before both", Position{TxID: 9}, []int64{100, 200, 350, 450}},
		{"at the first", Position{TxID: 10, EventID: 5}, []int64{150, 200, 350, 450}},
		{"past both", Position{TxID: 21}, []int64{150, 250, 350, 450}},
	}
	for _, tt := range tests {
		if got := k.offsets(tt.cursor); !slices.Equal(got, tt.want) {
			t.Errorf("%s: offsets(%v) = %v, want %v", tt.name, tt.cursor, got, tt.want)
		}
	}
	k.committed([]*kgo.Record{{Partition: 1, Offset: 260}, {Partition: 3, Offset: 451}, {Partition: 1, Offset: 262}})
	if got, want := k.offsets(Position{TxID: 30}), []int64{150, 263, 350, 452}; !slices.Equal(got, want) {
		t.Errorf("after commits: offsets = %v, want %v", got, want)
	}
}
