package main

import (
	"reflect"
	"testing"
)

func TestSplitJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
		tail string
	}{
		{"empty", "", nil, ""},
		{"only whitespace", " \n\t\r\n ", nil, ""},
		{"one", `{"a":1}`, []string{`{"a":1}`}, ""},
		{"concatenated", `{"a":1}{"a":2}`, []string{`{"a":1}`, `{"a":2}`}, ""},
		{"whitespace between", "\n {\"a\":1}\n\n\t{\"a\":2}  \n", []string{`{"a":1}`, `{"a":2}`}, ""},
		{"nested", `{"a":{"b":{"c":1}},"d":[{"e":2}]} {"f":3}`,
			[]string{`{"a":{"b":{"c":1}},"d":[{"e":2}]}`, `{"f":3}`}, ""},
		{"braces in strings", `{"m":"}{"} {"m":"{{{"}`, []string{`{"m":"}{"}`, `{"m":"{{{"}`}, ""},
		{"escaped quote", `{"m":"a\"}b"} {"m":"c"}`, []string{`{"m":"a\"}b"}`, `{"m":"c"}`}, ""},
		{"escaped backslash ends string", `{"m":"a\\"}{"m":"\\\"}"}`, []string{`{"m":"a\\"}`, `{"m":"\\\"}"}`}, ""},
		{"unicode escape", `{"m":"\u007b"}`, []string{`{"m":"\u007b"}`}, ""},
		{"multi-line pretty", "{\n  \"m\": \"x\"\n}\n{\n  \"m\": \"y\"\n}\n",
			[]string{"{\n  \"m\": \"x\"\n}", "{\n  \"m\": \"y\"\n}"}, ""},
		{"array of objects", `[{"a":1},{"a":2}]`, []string{`{"a":1}`, `{"a":2}`}, ""},
		{"garbage between skipped", `x {"a":1} , y {"a":2}`, []string{`{"a":1}`, `{"a":2}`}, ""},
		{"unterminated", `{"a":1} {"b":{"c":2}`, []string{`{"a":1}`}, `{"b":{"c":2}`},
		{"unterminated string", `{"a":"}`, nil, `{"a":"}`},
		{"stray closing brace ignored", `} {"a":1}`, []string{`{"a":1}`}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, tail := splitJSON([]byte(tt.in))
			var got []string
			for _, o := range objs {
				got = append(got, string(o))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("objects = %q, want %q", got, tt.want)
			}
			if string(tail) != tt.tail {
				t.Errorf("tail = %q, want %q", tail, tt.tail)
			}
		})
	}
}
