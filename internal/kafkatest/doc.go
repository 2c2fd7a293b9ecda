// Package kafkatest hands tests a Kafka broker: an in-process kfake cluster,
// or the real Apache Kafka broker that `make kafka-up` starts and whose
// address `make` exports in WEIR_KAFKA_BROKERS, and that broker's secured
// listeners (SASL_SSL, mutual TLS: NewSecure) with the certificates tests
// need (MintCert, MintCA, KfakeTLS). It is for tests only.
package kafkatest
