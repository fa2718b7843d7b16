package domain

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func TestFoldMakesOneDeliveryPerFinalEvent(t *testing.T) {
	spec := Event{EventID: "e1", TaskID: "task-1", TenantID: "acme", Version: 1, Kind: Spec, URL: "https://hooks.example.com/a"}
	progress := Event{EventID: "e2", TaskID: "task-1", Version: 2, Kind: Ignored}
	done := Event{EventID: "e3", TaskID: "task-1", Version: 3, At: t0, Kind: Final, Status: StatusCompleted}
	var task Task
	var got []*Delivery
	for _, e := range []Event{spec, progress, done} {
		var d *Delivery
		task, d, _ = Fold(task, e)
		if d != nil {
			got = append(got, d)
		}
	}
	want := Delivery{ID: "msg_e3", EventID: "e3", TenantID: "acme", TaskID: "task-1", Subject: SubjectTask,
		Status: StatusCompleted, URL: "https://hooks.example.com/a", Body: `{"task_id":"task-1","status":"completed"}`, CreatedAt: t0}
	if len(got) != 1 || *got[0] != want {
		t.Fatalf("deliveries = %+v", got)
	}
	if _, d, applied := Fold(task, done); applied || d != nil {
		t.Error("a redelivered final event made another delivery")
	}
	// A task without its own endpoint notifies the tenant's default.
	_, d, _ := Fold(Task{}, Event{EventID: "x", TaskID: "t2", TenantID: "acme", Version: 4, Kind: Final, Status: StatusCancelled})
	if d == nil || d.URL != "" || d.Body != `{"task_id":"t2","status":"cancelled"}` {
		t.Errorf("default endpoint delivery = %+v", d)
	}
}

// A group's end is one delivery with the documented group body, to the
// group's endpoint or ("" ) the tenant's default.
func TestGroupEnded(t *testing.T) {
	e := GroupEvent{EventID: "e9", GroupID: "grp-1", TenantID: "acme", At: t0.Add(time.Hour), Kind: Final, Status: StatusFailed}
	want := Delivery{ID: "msg_e9", EventID: "e9", TenantID: "acme", TaskID: "grp-1", Subject: SubjectGroup, Status: StatusFailed,
		URL: "https://hooks.example.com/g", Body: `{"task_group_id":"grp-1","status":"failed"}`, CreatedAt: t0.Add(time.Hour)}
	if got := GroupEnded(e, "https://hooks.example.com/g"); got != want {
		t.Fatalf("GroupEnded = %+v, want %+v", got, want)
	}
	if got := GroupEnded(e, ""); got.URL != "" || got.Body != want.Body {
		t.Errorf("default endpoint = %+v", got)
	}
	if got := CircuitOpened("e10", "acme", "grp-1", t0); got.Subject != SubjectGroup || got.Status != StatusCircuitOpen {
		t.Errorf("CircuitOpened = %+v", got)
	}
}

func TestSecretsAndSignature(t *testing.T) {
	key := bytes.Repeat([]byte{7}, SecretBytes)
	s := NewSecret(key)
	back, err := ParseSecret(s)
	if err != nil || !bytes.Equal(back, key) || s[:6] != "whsec_" {
		t.Fatalf("secret %q → %v, %v", s, back, err)
	}
	for _, bad := range []string{"", "whsec_", "whsec_!!!", "sk_" + s[6:]} {
		if _, err := ParseSecret(bad); err == nil {
			t.Errorf("ParseSecret(%q) passed", bad)
		}
	}
	// The example of the Standard Webhooks specification.
	spec, _ := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	got := Sign(spec, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Errorf("signature = %s", got)
	}
}

func TestBackoffGrowsThenStops(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 8 * time.Second, MaxAge: time.Minute, Jitter: 0.5}
	deadline := t0.Add(time.Minute)
	prev := time.Duration(0)
	for n := 1; n <= 5; n++ {
		next, ok := b.Next(t0, n, deadline, 0.5) // r = 0.5: no jitter
		if !ok || next.Sub(t0) <= prev && n <= 4 || next.Sub(t0) > 8*time.Second {
			t.Errorf("failure %d: next in %s, ok %v", n, next.Sub(t0), ok)
		}
		prev = next.Sub(t0)
	}
	if next, _ := b.Next(t0, 1, deadline, 0); next.Sub(t0) != 500*time.Millisecond {
		t.Errorf("lowest jitter: %s", next.Sub(t0))
	}
	if _, ok := b.Next(t0.Add(55*time.Second), 4, deadline, 0.5); ok {
		t.Error("an attempt past the deadline was scheduled")
	}
}

func TestCheckURL(t *testing.T) {
	for _, ok := range []string{"", "https://hooks.example.com/x?y=1", "http://10.0.0.1:8080/hook"} {
		if err := CheckURL("url", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"ftp://x/", "/hook", "https://u:p@x/", "https://x/\x00", "https:///x", "http://0x7f.1/"} {
		var ie *InvalidError
		if err := CheckURL("url", bad); !errors.As(err, &ie) || ie.Field != "url" {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Refuse: the sequence rule, and a submission only as version 1; a final
// event of a task never seen before still notifies (Fold).
func TestRefuseEventsOutOfSequence(t *testing.T) {
	task := Task{TaskID: "t", TenantID: "acme", Version: 2}
	for _, tt := range []struct {
		name    string
		t       Task
		e       Event
		refused bool
	}{
		{"the next", task, Event{TaskID: "t", TenantID: "acme", Version: 3, Kind: Final}, false},
		{"seen before", task, Event{TaskID: "t", TenantID: "acme", Version: 1, Kind: Spec, Submission: true}, false},
		{"a final event of a task never seen", Task{}, Event{TaskID: "t", TenantID: "acme", Version: 4, Kind: Final}, false},
		{"a gap", task, Event{TaskID: "t", TenantID: "acme", Version: 9, Kind: Final}, true},
		{"a negative version", task, Event{TaskID: "t", TenantID: "acme", Version: -1, Kind: Final}, true},
		{"another tenant's", task, Event{TaskID: "t", TenantID: "globex", Version: 3, Kind: Final}, true},
		{"a submission later", task, Event{TaskID: "t", TenantID: "acme", Version: 3, Kind: Spec, Submission: true}, true},
		{"an update later", task, Event{TaskID: "t", TenantID: "acme", Version: 3, Kind: Spec}, false},
	} {
		if err := Refuse(tt.t, tt.e); (err != nil) != tt.refused {
			t.Errorf("%s: Refuse = %v, want refused %v", tt.name, err, tt.refused)
		}
	}
}
