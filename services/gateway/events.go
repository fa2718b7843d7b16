package gateway

import (
	"time"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/outbox"
)

// AdminTopic is the topic of the admin events (taskmesh.admin.events.v1,
// docs/events.md#admin-events): every change to tenants, API keys,
// operator keys and agents.
var AdminTopic = kafka.EnvelopeTopic(&adminv1.AdminEvent{})

// RelayName names the gateway's outbox relay (its checkpoint, lock and
// Kafka transactional id).
const RelayName = "gateway"

// adminRelayPoll is how often an idle relay looks for admin events: they
// are rare, and a fraction of a second is soon enough for an audit log.
const adminRelayPoll = 200 * time.Millisecond

// EventsConfig configures the relay that publishes the admin events the
// credential store appends to the gateway's events table.
type EventsConfig struct {
	// Kafka is where they are published. Without brokers no relay runs:
	// the events wait in the table, in order, for a gateway that has one.
	Kafka kafka.Config
	// Topic (default AdminTopic).
	Topic string
	// Partitions is used when the relay creates the topic (default 16).
	Partitions int32
}

// relay returns the admin event relay on g's database, nil without
// brokers. One relay per cluster publishes (by advisory lock); the other
// replicas' wait as standbys.
func (c EventsConfig) relay(g *Gateway) *outbox.Relay {
	if len(c.Kafka.Brokers) == 0 {
		return nil
	}
	topic := c.Topic
	if topic == "" {
		topic = AdminTopic
	}
	return outbox.New(g.db, outbox.Config{Name: RelayName, Topic: topic, Partitions: c.Partitions, Kafka: c.Kafka,
		PollInterval: adminRelayPoll, Logger: g.log})
}
