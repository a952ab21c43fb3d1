package baidustd

import (
	"strings"
	"testing"
)

// A reused Meta caches short names (decoding them then costs nothing) but
// never a long one, and Reset drops the names: a connection sitting idle
// after a request with a 10 MB name must not keep the name.
func TestMetaKeepsNoLongNames(t *testing.T) {
	var m Meta
	decode := func(svc, method string) {
		t.Helper()
		src := Meta{HasRequest: true, ServiceName: svc, MethodName: method, CorrelationID: 1}
		b := src.appendTo(nil, src.Size())
		if err := DecodeMeta(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.ServiceName != svc || m.MethodName != method {
			t.Fatal("names not decoded")
		}
	}
	decode("example.EchoService", "Echo")
	if m.serviceCache != "example.EchoService" || m.methodCache != "Echo" {
		t.Fatal("short names are cached")
	}
	huge := strings.Repeat("n", 10<<20)
	decode(huge, huge)
	m.Reset()
	if m.ServiceName != "" || m.MethodName != "" || len(m.serviceCache) > maxInterned || len(m.methodCache) > maxInterned {
		t.Fatalf("after Reset the Meta still holds %d+%d+%d+%d bytes of names",
			len(m.ServiceName), len(m.MethodName), len(m.serviceCache), len(m.methodCache))
	}
}
