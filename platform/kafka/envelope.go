package kafka

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	eventv1 "github.com/taskmesh/taskmesh/gen/taskmesh/event/v1"
)

// EnvelopeTopic returns the topic an event envelope is published on, as its
// proto message declares it with the (taskmesh.event.v1.topic) option
// (proto/taskmesh/event/v1/options.proto). Topic names live in the protos,
// beside the envelopes they carry, and nowhere else: producers and consumers
// in every module derive them from here.
//
// It panics when the message declares no topic: that is a programming error
// (the wrong message), found the first time the caller's package loads.
func EnvelopeTopic(envelope proto.Message) string {
	desc := envelope.ProtoReflect().Descriptor()
	topic, _ := proto.GetExtension(desc.Options(), eventv1.E_Topic).(string)
	if topic == "" {
		panic(fmt.Sprintf("kafka: message %s declares no (taskmesh.event.v1.topic) option", desc.FullName()))
	}
	return topic
}
