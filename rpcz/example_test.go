package rpcz_test

import (
	"fmt"
	"time"

	"github.com/gobrpc/gobrpc/rpcz"
)

// A hook receives every finished span, whether /rpcz is on or not: enough
// to rebuild it in a tracing system such as OpenTelemetry (a span with a
// fixed trace id, span id and parent, a start and an end), without gobrpc
// depending on one.
func ExampleSetHook() {
	exported := make(chan rpcz.Span, 1)
	rpcz.SetHook(func(s rpcz.Span) { exported <- s })
	defer rpcz.SetHook(nil)

	// What a call records when it ends (here by hand).
	rpcz.Record(rpcz.Span{Method: "example.EchoService.Echo", TraceID: 0x1234, SpanID: 0x99,
		ParentSpanID: 0x42, Start: time.Now(), Latency: 3 * time.Millisecond})

	s := <-exported
	fmt.Printf("trace %x span %x parent %x %s %v\n", s.TraceID, s.SpanID, s.ParentSpanID, s.Method, s.Latency)
	// Output: trace 1234 span 99 parent 42 example.EchoService.Echo 3ms
}
