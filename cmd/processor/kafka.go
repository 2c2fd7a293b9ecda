package main

import (
	"context"
	"io"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/kafkaio/kafkaconn"
)

// cliKafka is the Kafka connection of a CLI command: every client the
// command creates starts from opts. Its context ends as soon as a client
// meets a connection failure no retry fixes, and explain turns the
// command's error into that failure, so that a refused certificate or
// password is said once and at once, not after the command's timeout.
type cliKafka struct {
	ctx    context.Context
	opts   []kgo.Opt
	conn   *kafkaconn.Conn
	cancel context.CancelCauseFunc
}

func newCLIKafka(ctx context.Context, cfg *config.Config, logOut io.Writer) (*cliKafka, error) {
	log := newLogger(cfg, logOut)
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	conn, err := kafkaconn.New(cfg.Kafka, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-conn.Failed():
			cancel(conn.Err())
		case <-ctx.Done():
		}
	}()
	return &cliKafka{ctx: ctx, opts: conn.Opts(), conn: conn, cancel: cancel}, nil
}

// done ends the command's Kafka use and explains err.
func (k *cliKafka) done(err error) error {
	k.cancel(nil)
	return k.conn.Explain(err)
}
