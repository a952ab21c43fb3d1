package naming

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestList(t *testing.T) {
	tests := []struct {
		name, url string
		want      []Node
		badLogs   int
	}{
		{"one", "list://127.0.0.1:8000", []Node{{Addr: "127.0.0.1:8000"}}, 0},
		{"tags", "list://127.0.0.1:8000 1, 127.0.0.1:8001 tag two ,127.0.0.1:8002",
			[]Node{{Addr: "127.0.0.1:8000", Tag: "1"}, {Addr: "127.0.0.1:8001", Tag: "tag two"}, {Addr: "127.0.0.1:8002"}}, 0},
		{"bad entries skipped", "list://127.0.0.1:8000,bad,1.2.3.4:0,nohost.example:80,127.0.0.1:8001",
			[]Node{{Addr: "127.0.0.1:8000"}, {Addr: "127.0.0.1:8001"}}, 3},
		{"empty entries ignored", "list://,127.0.0.1:8000,, ,", []Node{{Addr: "127.0.0.1:8000"}}, 0},
		{"duplicates", "list://127.0.0.1:8001,127.0.0.1:8000,127.0.0.1:8001,127.0.0.1:8000 t,svc.example:8000",
			[]Node{{Addr: "127.0.0.1:8001"}, {Addr: "127.0.0.1:8000"}, {Addr: "127.0.0.1:8000", Tag: "t"}}, 0},
		{"empty", "list://", []Node{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := captureLogs(t)
			dns := useFakeDNS(t)
			dns.set("svc.example", "127.0.0.1")
			r, _ := start(t, tc.url)
			assert.Equal(t, tc.want, r.last())
			assert.Equal(t, tc.badLogs, logs.count("skipped an entry"))
		})
	}
}
