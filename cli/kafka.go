package cli

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/kafkaio/kafkaconn"
	"github.com/weir-stream/weir/stream"
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

// withKafka is the body of a CLI command that talks to the job's Kafka:
// it loads the configuration of job (loadConfig), gives the
// command 60 seconds, and runs fn with the Kafka connection's context and
// client options, explaining fn's error as cliKafka.done does.
func withKafka(cmd *cobra.Command, file string, job *stream.Job, fn func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error) error {
	cfg, err := loadConfig(file, cmd.Flags(), job)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
	defer cancel()
	k, err := newCLIKafka(ctx, cfg, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	return k.done(fn(k.ctx, cfg, k.opts))
}
