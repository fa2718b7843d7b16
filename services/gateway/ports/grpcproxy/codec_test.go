package grpcproxy

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func TestCodecPassesFramesThrough(t *testing.T) {
	msg := &taskv1.GetTaskRequest{Id: "task-001"}
	wire, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var c codec
	f := &frame{}
	if err := c.Unmarshal(wire, f); err != nil {
		t.Fatal(err)
	}
	out, err := c.Marshal(f)
	if err != nil || !bytes.Equal(out, wire) {
		t.Errorf("frame round trip = %x, %v; want %x", out, err, wire)
	}
	// Real messages (the health service) are encoded as protobuf.
	enc, err := c.Marshal(msg)
	if err != nil || !bytes.Equal(enc, wire) {
		t.Errorf("Marshal(message) = %x, %v", enc, err)
	}
	var back taskv1.GetTaskRequest
	if err := c.Unmarshal(wire, &back); err != nil || back.GetId() != "task-001" {
		t.Errorf("Unmarshal(message) = %v, %v", &back, err)
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal(string) succeeded")
	}
	if c.Name() != "proto" {
		t.Errorf("Name = %q", c.Name())
	}
}
