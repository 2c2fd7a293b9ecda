// Package controltopic is the Kafka transport of the control protocol
// (package control): the control topics of a job (Topics, EnsureTopics), the
// coordinator's transactional Writer (fenced by a newer coordinator), the
// tasks' AckWriter, and the readers: ReadHistory, StableEnd and Tail.
package controltopic
