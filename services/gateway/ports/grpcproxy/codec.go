package grpcproxy

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// frame is one message in its wire encoding, forwarded without decoding.
type frame struct{ payload []byte }

// codec passes frames through and encodes everything else as protobuf: the
// server forces one codec for all its services, and the health service it
// serves itself speaks real messages.
//
// It implements the original encoding.Codec, whose Unmarshal receives a
// fresh copy of the message (grpc materializes it): a frame may keep the
// slice after Unmarshal returns, which the pooled buffers of CodecV2 would
// not allow.
type codec struct{}

func (codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *frame:
		return m.payload, nil
	case proto.Message:
		return proto.Marshal(m)
	}
	return nil, fmt.Errorf("grpcproxy codec: cannot marshal %T", v)
}

func (codec) Unmarshal(data []byte, v any) error {
	switch m := v.(type) {
	case *frame:
		m.payload = data
		return nil
	case proto.Message:
		return proto.Unmarshal(data, m)
	}
	return fmt.Errorf("grpcproxy codec: cannot unmarshal into %T", v)
}

// Name is "proto" so both ends see an ordinary application/grpc+proto call.
func (codec) Name() string { return "proto" }
