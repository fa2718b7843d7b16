package kafka

import "fmt"

// PartitionFor returns the partition Kafka's default (Java) partitioner picks
// for key: (murmur2(key) & 0x7fffffff) % partitions. It matches franz-go's
// kgo.StickyKeyPartitioner(nil) for non-nil keys, so the outbox relay can
// pin a record's partition itself and tests can predict it.
//
// A nil key is hashed like an empty one here, whereas franz-go and the Java
// client spread nil-keyed records over partitions: pin such records with
// kgo.ManualPartitioner and this function, or give them a key.
//
// Note that librdkafka (and therefore kcat) defaults to a CRC32 partitioner;
// set partitioner=murmur2_random there to agree with this function.
//
// It panics when partitions is not positive, which is a caller bug (use
// Partitions to learn the real count).
func PartitionFor(key []byte, partitions int32) int32 {
	if partitions <= 0 {
		panic(fmt.Sprintf("kafka: PartitionFor with %d partitions", partitions))
	}
	return int32(murmur2(key)&0x7fffffff) % partitions
}

// murmur2 is Kafka's org.apache.kafka.common.utils.Utils.murmur2 on unsigned
// arithmetic (Java's signed ints wrap identically).
func murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(data))
	for len(data) >= 4 {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		data = data[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
