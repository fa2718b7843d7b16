package bench

import (
	"testing"
	"time"
)

func TestRoomAtCountsSlotsTakenOrSpokenFor(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// The hand-off measured: its stage before finished at 100 ms.
	next := &stageTask{stage: "bie", handedOff: at(100), submitted: at(120), admittedAt: at(130), finished: at(900)}
	tests := []struct {
		name string
		x    stageTask
		want int
	}{
		{"holds a slot: admitted, not ended", stageTask{stage: "bie", handedOff: at(0), submitted: at(10), admittedAt: at(20), finished: at(500)}, 1},
		{"ended before", stageTask{stage: "bie", handedOff: at(0), submitted: at(10), admittedAt: at(20), finished: at(90)}, 0},
		{"waits: created, not admitted", stageTask{stage: "bie", handedOff: at(0), submitted: at(10), admittedAt: at(300), finished: at(800)}, 1},
		{"on its way: handed off earlier, not created yet", stageTask{stage: "bie", handedOff: at(95), submitted: at(140), admittedAt: at(150), finished: at(700)}, 1},
		{"handed off later", stageTask{stage: "bie", handedOff: at(105), submitted: at(110), admittedAt: at(115), finished: at(700)}, 0},
		{"created later without an earlier hand-off", stageTask{stage: "bie", handedOff: at(150), submitted: at(160), admittedAt: at(170), finished: at(700)}, 0},
		{"another pool", stageTask{stage: "nef", handedOff: at(0), submitted: at(10), admittedAt: at(20), finished: at(500)}, 0},
	}
	for _, tc := range tests {
		x := tc.x
		tasks := map[string]*stageTask{"next": next, "x": &x}
		if got := roomAt(tasks, next, next.handedOff); got != tc.want {
			t.Errorf("%s: roomAt = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := roomAt(map[string]*stageTask{"next": next}, next, next.handedOff); got != 0 {
		t.Errorf("the measured hand-off counted itself: roomAt = %d", got)
	}
}

func TestSlowestHandOffsComeSlowestFirstWithTheirSteps(t *testing.T) {
	steps := func(ms ...int) []time.Duration {
		out := make([]time.Duration, len(handoffSteps))
		for i, m := range ms {
			out[i] = time.Duration(m) * time.Millisecond
		}
		return out
	}
	hs := []handoffTiming{
		{at: 200 * time.Millisecond, from: "onnx", to: "bie", claimable: 90 * time.Millisecond, stepsTaken: steps(10, 20, 0, 50, 10)},
		{at: 1500 * time.Millisecond, from: "bie", to: "nef", claimable: 120 * time.Millisecond, stepsTaken: steps(30, 40, 0, 45, 5)},
		{at: 3 * time.Second, from: "bie", to: "nef", claimable: 40 * time.Millisecond, stepsTaken: steps(10, 10, 0, 15, 5)},
	}
	got := slowest(hs, 2)
	if len(got) != 2 || got[0].claimable != 120*time.Millisecond || got[1].claimable != 90*time.Millisecond {
		t.Fatalf("slowest(2) = %v", got)
	}
	if len(slowest(hs, 10)) != 3 || len(slowest(nil, 3)) != 0 {
		t.Fatal("slowest returns at most what it is given")
	}
	want := "1.50 s bie → nef 120.0 ms (done → next submitted 30.0 ms, submitted → workload queued 40.0 ms, " +
		"workload queued → admitted 0.0 ms, workload admitted → task admitted 45.0 ms, task admitted → committed 5.0 ms)"
	if s := got[0].String(); s != want {
		t.Errorf("line:\n got %s\nwant %s", s, want)
	}
}
