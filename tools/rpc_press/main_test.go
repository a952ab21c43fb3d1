package main

import (
	"flag"
	"io"
	"log"
	"os"
	"testing"
)

// TestMain keeps rpc_press's log lines (loaded requests, RPC errors) out
// of the test output unless -v.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		log.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}
