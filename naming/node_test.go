package naming

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitServerAndTag(t *testing.T) {
	tests := []struct {
		line, addr, tag string
		ok              bool
	}{
		{"", "", "", false},
		{"   \t", "", "", false},
		{"# comment", "", "", false},
		{"  # indented comment", "", "", false},
		{"1.2.3.4:80", "1.2.3.4:80", "", true},
		{"  1.2.3.4:80  ", "1.2.3.4:80", "", true},
		{"1.2.3.4:80 tag", "1.2.3.4:80", "tag", true},
		{"1.2.3.4:80\t tag with spaces \t", "1.2.3.4:80", "tag with spaces", true},
		{"1.2.3.4:80 tag # comment", "1.2.3.4:80", "tag", true},
		{"1.2.3.4:80 # comment", "1.2.3.4:80", "", true},
		{"1.2.3.4:80 10\r", "1.2.3.4:80", "10", true},
		{"1.2.3.4:80#x", "1.2.3.4:80#x", "", true}, // the address is the run of non-blanks
	}
	for _, tc := range tests {
		addr, tag, ok := splitServerAndTag(tc.line)
		assert.Equal(t, tc.ok, ok, "%q", tc.line)
		assert.Equal(t, tc.addr, addr, "%q", tc.line)
		assert.Equal(t, tc.tag, tag, "%q", tc.line)
	}
}

func TestParseNode(t *testing.T) {
	dns := useFakeDNS(t)
	dns.set("svc.example", "::1", "10.0.0.7", "10.0.0.8")
	dns.set("v6only.example", "::2")
	tests := []struct {
		name, entry string
		want        Node
		wantErr     bool
	}{
		{"ip", "127.0.0.1:8000", Node{Addr: "127.0.0.1:8000"}, false},
		{"ip and tag", " 127.0.0.1:8000  w=3 ", Node{Addr: "127.0.0.1:8000", Tag: "w=3"}, false},
		{"ipv6 literal", "[::1]:8000 t", Node{Addr: "[::1]:8000", Tag: "t"}, false},
		{"host resolved to first IPv4", "svc.example:81 a", Node{Addr: "10.0.0.7:81", Tag: "a"}, false},
		{"port bounds", "1.2.3.4:65535", Node{Addr: "1.2.3.4:65535"}, false},
		{"port zero", "1.2.3.4:0", Node{}, true},
		{"port too big", "1.2.3.4:65536", Node{}, true},
		{"port sign", "1.2.3.4:+80", Node{}, true},
		{"port name", "1.2.3.4:http", Node{}, true},
		{"no port", "1.2.3.4", Node{}, true},
		{"no host", ":80", Node{}, true},
		{"unknown host", "nohost.example:80", Node{}, true},
		{"ipv6 only host", "v6only.example:80", Node{}, true},
		{"blank", "  ", Node{}, true},
		{"comment", "# 1.2.3.4:80", Node{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNode(tc.entry)
			if tc.wantErr {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "naming: ")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseNodeLocalhost(t *testing.T) {
	n, err := ParseNode("localhost:8000")
	if err != nil {
		t.Skipf("localhost does not resolve to IPv4 here: %v", err)
	}
	assert.Equal(t, "127.0.0.1:8000", n.Addr)
}

func TestDedupe(t *testing.T) {
	a, b := Node{Addr: "1.1.1.1:1"}, Node{Addr: "2.2.2.2:2"}
	aTag := Node{Addr: "1.1.1.1:1", Tag: "x"}
	tests := []struct {
		name     string
		in, want []Node
	}{
		{"nil", nil, []Node{}},
		{"no dups", []Node{b, a}, []Node{b, a}},
		{"dups keep first order", []Node{b, a, b, a, b}, []Node{b, a}},
		{"same addr other tag", []Node{a, aTag, a}, []Node{a, aTag}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]Node(nil), tc.in...)
			got := Dedupe(tc.in)
			assert.Equal(t, tc.want, got)
			assert.NotNil(t, got)
			assert.Equal(t, in, tc.in, "input untouched")
		})
	}
}
