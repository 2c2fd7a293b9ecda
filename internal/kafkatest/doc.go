// Package kafkatest hands tests a Kafka broker: an in-process kfake cluster,
// or the real Apache Kafka broker that `make kafka-up` starts and whose
// address `make` exports in WEIR_KAFKA_BROKERS. It is for tests only.
package kafkatest
