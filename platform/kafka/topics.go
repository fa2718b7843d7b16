package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicSpec is a topic to create when missing.
//
// Partitions <= 0 and ReplicationFactor <= 0 ask for the broker default
// (Kafka's -1), so a zero TopicSpec with only a name is valid.
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16 // -1 = broker default
	Configs           map[string]*string
}

// metadataWait bounds how long EnsureTopics waits for new topics to show up in
// metadata when ctx has no deadline of its own.
const metadataWait = 30 * time.Second

// EnsureTopics creates missing topics. Existing topics are left alone, even
// when their partition count or configs differ from the spec: changing a live
// topic is an operator decision, and a different partition count moves keys
// (ask Partitions for the actual count instead of trusting the spec).
//
// It returns once metadata lists every topic, so a Partitions or produce call
// right after does not race the broker's metadata propagation. Errors of
// several topics are joined; each wraps the kerr error, so
// errors.Is(err, kerr.PolicyViolation) and the like work.
func EnsureTopics(ctx context.Context, cl *kgo.Client, topics ...TopicSpec) error {
	if len(topics) == 0 {
		return nil
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = requestTimeoutMillis(ctx)
	seen := make(map[string]bool, len(topics))
	for _, spec := range topics {
		if spec.Name == "" {
			return errors.New("kafka: topic spec without a name")
		}
		if err := validTopicName(spec.Name); err != nil {
			return err
		}
		if seen[spec.Name] {
			return fmt.Errorf("kafka: topic %q listed twice", spec.Name)
		}
		seen[spec.Name] = true
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = spec.Name
		rt.NumPartitions = spec.Partitions
		if spec.Partitions <= 0 {
			rt.NumPartitions = -1
		}
		rt.ReplicationFactor = spec.ReplicationFactor
		if spec.ReplicationFactor <= 0 {
			rt.ReplicationFactor = -1
		}
		for k, v := range spec.Configs {
			rc := kmsg.NewCreateTopicsRequestTopicConfig()
			rc.Name, rc.Value = k, v
			rt.Configs = append(rt.Configs, rc)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka: create topics: %w", err)
	}
	var errs []error
	for _, t := range resp.Topics {
		err := kerr.ErrorForCode(t.ErrorCode)
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			continue
		}
		msg := ""
		if t.ErrorMessage != nil {
			msg = ": " + *t.ErrorMessage
		}
		errs = append(errs, fmt.Errorf("kafka: create topic %q%s: %w", t.Topic, msg, err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return waitForTopics(ctx, cl, topics)
}

// waitForTopics polls metadata until every topic is known. Real clusters
// answer CreateTopics from the controller before every broker has the new
// metadata; kfake answers immediately, so there this is a single request.
func waitForTopics(ctx context.Context, cl *kgo.Client, topics []TopicSpec) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, metadataWait)
		defer cancel()
	}
	for _, spec := range topics {
		for {
			_, err := Partitions(ctx, cl, spec.Name)
			if err == nil {
				break
			}
			if !errors.Is(err, kerr.UnknownTopicOrPartition) && !errors.Is(err, kerr.LeaderNotAvailable) {
				return err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("kafka: topic %q created but not yet in metadata: %w", spec.Name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// Partitions returns the partition count of topic with a fresh metadata
// request (not franz-go's cache, which may predate a partition increase).
// A missing topic yields an error wrapping kerr.UnknownTopicOrPartition; it is
// never auto-created.
func Partitions(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("kafka: metadata for topic %q: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return 0, fmt.Errorf("kafka: metadata for topic %q: %w", topic, err)
		}
		if len(t.Partitions) == 0 {
			return 0, fmt.Errorf("kafka: metadata for topic %q: %w", topic, kerr.LeaderNotAvailable)
		}
		return int32(len(t.Partitions)), nil
	}
	return 0, fmt.Errorf("kafka: metadata for topic %q: %w", topic, kerr.UnknownTopicOrPartition)
}

// validTopicName applies Kafka's topic name rules (Topic.validate in the Java
// broker). kfake accepts any name, so without this check a name that works
// against the embedded broker would fail only in production.
func validTopicName(name string) error {
	if name == "." || name == ".." {
		return fmt.Errorf("kafka: topic name %q is not allowed", name)
	}
	if len(name) > 249 {
		return fmt.Errorf("kafka: topic name %q is longer than 249 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("kafka: topic name %q has %q; only ASCII letters, digits, '.', '_' and '-' are allowed", name, r)
		}
	}
	return nil
}

// requestTimeoutMillis is the broker-side timeout for CreateTopics: the time
// left on ctx, capped to 30s, default 15s.
func requestTimeoutMillis(ctx context.Context) int32 {
	d := 15 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = min(time.Until(dl), 30*time.Second)
	}
	return int32(max(d.Milliseconds(), 1))
}
