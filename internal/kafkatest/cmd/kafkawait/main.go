// Command kafkawait waits until a Kafka broker answers metadata and API
// version requests, then prints the protocol version it speaks. The test
// scripts use it to know when a freshly started broker is ready. With
// -sasl-ssl, -mtls and -tls-dir it also waits for the secured listeners
// (kafkatest.PingSecure).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/weir-stream/weir/internal/kafkatest"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap addresses")
	saslSSL := flag.String("sasl-ssl", "", "comma-separated SASL_SSL addresses to check too (SCRAM-SHA-512)")
	mtls := flag.String("mtls", "", "comma-separated mutual-TLS addresses to check too")
	tlsDir := flag.String("tls-dir", "", "the broker's TLS directory (CA and client certificate), for -sasl-ssl and -mtls")
	timeout := flag.Duration("timeout", 60*time.Second, "how long to wait")
	flag.Parse()
	secure := *saslSSL != "" || *mtls != ""
	if secure && (*saslSSL == "" || *mtls == "" || *tlsDir == "") {
		fmt.Fprintln(os.Stderr, "kafkawait: -sasl-ssl, -mtls and -tls-dir go together")
		os.Exit(2)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		guess, err := kafkatest.Ping(attempt, strings.Split(*brokers, ","))
		if err == nil && secure {
			err = kafkatest.PingSecure(attempt, strings.Split(*saslSSL, ","), strings.Split(*mtls, ","), *tlsDir)
		}
		cancelAttempt()
		if err == nil {
			fmt.Printf("broker at %s answers (protocol %s)\n", *brokers, guess)
			if secure {
				fmt.Printf("secured listeners answer: SASL_SSL at %s, mTLS at %s\n", *saslSSL, *mtls)
			}
			return
		}
		last = err
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "kafkawait: no answer from %s within %v: %v\n", *brokers, *timeout, last)
			os.Exit(1)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
