package docsnippets

import (
	"strings"
	"testing"
)

// The harness itself: how blocks are found, classified and completed. These
// need no build.

func TestExtract(t *testing.T) {
	md := strings.Join([]string{
		/* 1 */ "# Title",
		/* 2 */ "",
		/* 3 */ "```sh",
		/* 4 */ "<!-- snippet: var ignored int -->",
		/* 5 */ "```",
		/* 6 */ "",
		/* 7 */ "<!-- snippet: var ch channel.Channel -->",
		/* 8 */ "```go",
		/* 9 */ "ch.Close()",
		/* 10 */ "```",
		/* 11 */ "1. item",
		/* 12 */ "",
		/* 13 */ "   <!-- snippet:",
		/* 14 */ "   var opts channel.Options",
		/* 15 */ "   -->",
		/* 16 */ "   ```go",
		/* 17 */ "   opts.MaxRetry = 1",
		/* 18 */ "   ```",
		/* 19 */ "<!-- snippet: var stray int -->",
		/* 20 */ "",
		/* 21 */ "```go skip-compile",
		/* 22 */ "not go",
		/* 23 */ "```",
		/* 24 */ "```go skip_compile",
		/* 25 */ "x := 1",
		/* 26 */ "```",
		/* 27 */ "```proto",
		/* 28 */ "syntax = \"proto2\";",
		/* 29 */ "```",
	}, "\n")
	got, problems := extract("a.md", "/abs/a.md", []byte(md))
	if len(got) != 4 {
		t.Fatalf("got %d blocks, want 4: %+v", len(got), got)
	}
	if s := got[0]; s.line != 8 || s.declsLine != 7 || strings.TrimSpace(s.decls) != "var ch channel.Channel" || s.body[0] != "ch.Close()" {
		t.Errorf("block 1: %+v", s)
	}
	if s := got[1]; s.line != 16 || s.declsLine != 13 || s.body[0] != "opts.MaxRetry = 1" {
		t.Errorf("block 2 (in a list): %+v", s)
	}
	// The directive keeps the Markdown lines: its declaration is on line
	// 14, one line below the comment's start.
	if d := got[1].decls; strings.Count(d, "\n") != 2 || !strings.Contains(strings.Split(d, "\n")[1], "var opts channel.Options") {
		t.Errorf("block 2 directive %q", d)
	}
	if !got[2].skip || got[2].decls != "" {
		t.Errorf("block 3: %+v", got[2])
	}
	want := []string{
		`a.md:19: <!-- snippet: ... --> comment is not on the line right before`,
		`a.md:24: unknown word "skip_compile"`,
	}
	if len(problems) != len(want) {
		t.Fatalf("problems %q, want %d", problems, len(want))
	}
	for _, w := range want {
		found := false
		for _, p := range problems {
			found = found || strings.HasPrefix(p, w)
		}
		if !found {
			t.Errorf("no problem %q in %q", w, problems)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		body  string
		kind  kind
		split int
	}{
		{"package main\n\nfunc main() {}", wholeFile, 0},
		{"// Package x.\npackage x", wholeFile, 0},
		{"type T struct{}\n\nfunc (T) M() {}", declsOnly, 0},
		{"var x = 1", declsOnly, 0}, // both parse: declarations win
		{"x := 1\nfmt.Println(x)", stmtsOnly, 0},
		{"type T struct{}\nfunc (T) M() {\n}\n\nt := T{}\nt.M()", mixed, 4},
		{"import _ \"net/http/pprof\"\n\nerr := f()", mixed, 2},
		{"if err != nil { ... }", notGo, 0},
	} {
		lines := strings.Split(c.body, "\n")
		if k, split := classify(lines); k != c.kind || split != c.split {
			t.Errorf("classify(%q) = %v, %d; want %v, %d", c.body, k, split, c.kind, c.split)
		}
	}
}

func TestGenerate(t *testing.T) {
	s := snippet{
		file: "a.md", abs: "/abs/a.md", line: 10,
		body:  []string{"var server int", "srv := server", "h, err := ch.Init(x)", "log.Print(time.Now(), srv)"},
		decls: "              var ch channel.Channel    ", declsLine: 9,
	}
	src, k := generateFile(&s)
	if k != stmtsOnly {
		t.Fatalf("kind %v", k)
	}
	for _, want := range []string{
		"\t\"github.com/gobrpc/gobrpc/channel\"\n",
		"\t\"log\"\n",
		"\t\"time\"\n",
		"//line /abs/a.md:9:1\n              var ch channel.Channel",
		"func _() {\n//line /abs/a.md:11:1\nvar server int\n",
		"\t_ = server\n\t_ = srv\n\t_ = h\n\t_ = err\n}\n",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("generated file lacks %q:\n%s", want, src)
		}
	}
	// server is a variable of the fragment, not the package.
	if strings.Contains(src, "gobrpc/server\"") {
		t.Errorf("imports server although the fragment declares it:\n%s", src)
	}

	etcd := snippet{file: "b.md", abs: "/abs/b.md", line: 1, body: []string{"etcdnaming.Register(nil, nil, \"\", \"\", \"\", 0)"}}
	src, _, inWorkspace := generate(&etcd)
	if !inWorkspace || !strings.Contains(src, `etcdnaming "github.com/gobrpc/gobrpc/naming/etcd"`) {
		t.Errorf("etcdnaming: inWorkspace %v\n%s", inWorkspace, src)
	}
	if _, _, inWorkspace := generate(&s); inWorkspace {
		t.Error("a snippet of the main module counted as needing the workspace")
	}
}
