package docsnippets

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/version"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const modulePath = "github.com/gobrpc/gobrpc"

// importTable maps the package names a fragment may use without importing
// them to their import paths.
var importTable = map[string]string{
	"auth":         modulePath + "/auth",
	"backup":       modulePath + "/backup",
	"builtin":      modulePath + "/server/builtin",
	"bvar":         modulePath + "/bvar",
	"channel":      modulePath + "/channel",
	"controller":   modulePath + "/controller",
	"echopb":       modulePath + "/example/echo/echopb",
	"errno":        modulePath + "/errno",
	"etcdnaming":   modulePath + "/naming/etcd",
	"flags":        modulePath + "/flags",
	"grpc":         modulePath + "/protocol/grpc",
	"limiter":      modulePath + "/server/limiter",
	"loadbalancer": modulePath + "/loadbalancer",
	"naming":       modulePath + "/naming",
	"rpc":          modulePath + "/rpc",
	"rpcz":         modulePath + "/rpcz",
	"server":       modulePath + "/server",

	"proto":        "google.golang.org/protobuf/proto",
	"protoreflect": "google.golang.org/protobuf/reflect/protoreflect",

	"atomic":  "sync/atomic",
	"bufio":   "bufio",
	"bytes":   "bytes",
	"context": "context",
	"errors":  "errors",
	"flag":    "flag",
	"fmt":     "fmt",
	"http":    "net/http",
	"io":      "io",
	"log":     "log",
	"net":     "net",
	"os":      "os",
	"rand":    "math/rand",
	"signal":  "os/signal",
	"slog":    "log/slog",
	"sort":    "sort",
	"strconv": "strconv",
	"strings": "strings",
	"sync":    "sync",
	"time":    "time",
}

// workspaceModules are the modules of the repository, besides the main one,
// that snippets may import; the snippets are built in a workspace of them.
var workspaceModules = []string{"naming/etcd"}

// skipWord in a fence's info string (```go skip-compile) opts a block out.
const skipWord = "skip-compile"

// snippet is one ```go block of a Markdown file.
type snippet struct {
	file      string   // slash path relative to the repository root
	abs       string   // absolute path, for //line directives
	line      int      // line of the opening fence (1-based)
	body      []string // the lines inside the fence, its indentation removed
	skip      bool     // ```go skip-compile
	notGo     bool     // parses neither as declarations nor as statements
	decls     string   // declarations of the <!-- snippet: ... --> comment
	declsLine int      // line of that comment's first line
}

func (s *snippet) pos() string { return s.file + ":" + strconv.Itoa(s.line) }

var (
	fenceRE     = regexp.MustCompile("^([ \t]*)(`{3,}|~{3,})(.*)$")
	directiveRE = regexp.MustCompile(`^\s*<!--\s*snippet:`)
)

// extract returns the ```go blocks of a Markdown file, and the mistakes in
// how they are marked up (a directive comment that no Go block follows, an
// unknown fence option, an unclosed fence).
func extract(file, abs string, src []byte) ([]snippet, []string) {
	lines := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
	var (
		out      []snippet
		problems []string
		used     = map[int]bool{} // lines of directive comments a block took
	)
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence, info := len(m[1]), m[2], strings.Fields(m[3])
		if fence[0] == '`' && strings.Contains(m[3], "`") {
			continue // inline code, not a fence
		}
		// Find the closing fence: the same character, at least as long,
		// nothing after it.
		end := -1
		for j := i + 1; j < len(lines); j++ {
			t := strings.TrimSpace(lines[j])
			if len(t) >= len(fence) && strings.Trim(t, fence[:1]) == "" {
				end = j
				break
			}
		}
		isGo := len(info) > 0 && strings.EqualFold(info[0], "go")
		if end < 0 {
			if isGo {
				problems = append(problems, fmt.Sprintf("%s:%d: ```go block has no closing fence", file, i+1))
			}
			break
		}
		if !isGo {
			i = end
			continue
		}
		s := snippet{file: file, abs: abs, line: i + 1}
		for _, w := range info[1:] {
			if w == skipWord {
				s.skip = true
			} else {
				problems = append(problems, fmt.Sprintf("%s:%d: unknown word %q after ```go (the only one known is %q)", file, i+1, w, skipWord))
			}
		}
		for _, l := range lines[i+1 : end] {
			s.body = append(s.body, dedent(l, indent))
		}
		// A <!-- snippet: ... --> comment ending on the line before the fence.
		if i > 0 && strings.HasSuffix(strings.TrimSpace(lines[i-1]), "-->") {
			first := i - 1
			for first > 0 && !strings.Contains(lines[first], "<!--") {
				first--
			}
			if directiveRE.MatchString(lines[first]) {
				s.decls, s.declsLine = directiveDecls(lines[first:i]), first+1
				used[first] = true
			}
		}
		out = append(out, s)
		i = end
	}
	// A directive comment must sit right before a Go block; one elsewhere
	// (a blank line in between, before a ```sh block) would be ignored.
	inFence := ""
	for i, l := range lines {
		if m := fenceRE.FindStringSubmatch(l); m != nil && !(m[2][0] == '`' && strings.Contains(m[3], "`")) {
			switch {
			case inFence == "":
				inFence = m[2]
			case strings.TrimSpace(m[3]) == "" && len(m[2]) >= len(inFence) && m[2][0] == inFence[0]:
				inFence = ""
			}
			continue
		}
		if inFence == "" && directiveRE.MatchString(l) && !used[i] {
			problems = append(problems, fmt.Sprintf("%s:%d: <!-- snippet: ... --> comment is not on the line right before a ```go fence (it must end there)", file, i+1))
		}
	}
	return out, problems
}

// dedent removes up to n leading spaces (a fence's indentation in a list).
func dedent(l string, n int) string {
	for k := 0; k < n && strings.HasPrefix(l, " "); k++ {
		l = l[1:]
	}
	return l
}

// directiveDecls returns the Go text of a directive comment's lines with
// the comment markers blanked out, so lines and columns stay those of the
// Markdown file.
func directiveDecls(lines []string) string {
	text := strings.Join(lines, "\n")
	loc := regexp.MustCompile(`<!--\s*snippet:`).FindStringIndex(text)
	text = text[:loc[0]] + strings.Repeat(" ", loc[1]-loc[0]) + text[loc[1]:]
	k := strings.LastIndex(text, "-->")
	return text[:k] + "   " + text[k+3:]
}

// kind is how a fragment is compiled.
type kind int

const (
	wholeFile kind = iota // starts with a package clause
	declsOnly             // top-level declarations
	stmtsOnly             // statements, in a function body
	mixed                 // declarations, then statements
	notGo                 // none of these: compiled as statements
)

func (k kind) String() string {
	return [...]string{"a whole file", "declarations", "statements", "declarations then statements", "not Go"}[k]
}

// classify decides how a snippet compiles and, for mixed, where its
// statements start (an index into body).
func classify(body []string) (kind, int) {
	for _, l := range body {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "//") {
			continue
		}
		if strings.HasPrefix(t, "package ") {
			return wholeFile, 0
		}
		break
	}
	if parsesAsDecls(body) {
		return declsOnly, 0
	}
	if parsesAsStmts(body) {
		return stmtsOnly, 0
	}
	for k := 1; k < len(body); k++ {
		l := body[k]
		if l == "" || l[0] == ' ' || l[0] == '\t' || l[0] == '}' || l[0] == ')' {
			continue
		}
		if parsesAsDecls(body[:k]) && parsesAsStmts(body[k:]) {
			return mixed, k
		}
	}
	// Not Go: compile it as statements and let the compiler say where.
	return notGo, 0
}

func parsesAsDecls(lines []string) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+strings.Join(lines, "\n"), parser.SkipObjectResolution)
	return err == nil
}

func parsesAsStmts(lines []string) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+strings.Join(lines, "\n")+"\n}", parser.SkipObjectResolution)
	return err == nil
}

// names is what import inference needs to know about some Go code.
type names struct {
	declared map[string]bool // every name the code declares, at any level
	used     map[string]bool // every X of an X.Sel
	imported map[string]bool // package names the code imports itself
}

func (n *names) add(f *ast.File) {
	ident := func(e ast.Expr) {
		if id, ok := e.(*ast.Ident); ok {
			n.declared[id.Name] = true
		}
	}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		switch {
		case im.Name == nil:
			n.imported[path.Base(p)] = true
		case im.Name.Name != "_" && im.Name.Name != ".":
			n.imported[im.Name.Name] = true
		}
	}
	ast.Inspect(f, func(node ast.Node) bool {
		switch x := node.(type) {
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok {
				n.used[id.Name] = true
			}
		case *ast.FuncDecl:
			n.declared[x.Name.Name] = true
		case *ast.Field:
			for _, id := range x.Names {
				n.declared[id.Name] = true
			}
		case *ast.ValueSpec:
			for _, id := range x.Names {
				n.declared[id.Name] = true
			}
		case *ast.TypeSpec:
			n.declared[x.Name.Name] = true
		case *ast.AssignStmt:
			if x.Tok == token.DEFINE {
				for _, e := range x.Lhs {
					ident(e)
				}
			}
		case *ast.RangeStmt:
			if x.Tok == token.DEFINE {
				ident(x.Key)
				ident(x.Value)
			}
		}
		return true
	})
}

// packageName is the name importTable gives the package of an import path.
func packageName(importPath string) string {
	for name, p := range importTable {
		if p == importPath {
			return name
		}
	}
	return path.Base(importPath)
}

// topLevelVars are the variables the statements declare in the function
// body itself, which the generated code uses once so that a fragment may
// leave them unused.
func topLevelVars(f *ast.File) []string {
	var out []string
	seen := map[string]bool{"_": true}
	add := func(id *ast.Ident) {
		if !seen[id.Name] {
			seen[id.Name] = true
			out = append(out, id.Name)
		}
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		for _, st := range fd.Body.List {
			switch x := st.(type) {
			case *ast.AssignStmt:
				if x.Tok == token.DEFINE {
					for _, e := range x.Lhs {
						if id, ok := e.(*ast.Ident); ok {
							add(id)
						}
					}
				}
			case *ast.DeclStmt:
				if g, ok := x.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
					for _, sp := range g.Specs {
						for _, id := range sp.(*ast.ValueSpec).Names {
							add(id)
						}
					}
				}
			}
		}
	}
	return out
}

// lineDirective makes the compiler report the next line as line of file.
func lineDirective(file string, line int) string {
	return fmt.Sprintf("//line %s:%d:1\n", file, line)
}

// generate returns the Go file that compiles s, how it compiles it, and
// whether it imports a package of one of the workspaceModules.
func generate(s *snippet) (string, kind, bool) {
	src, k := generateFile(s)
	return src, k, importsWorkspaceModule(src)
}

// importsWorkspaceModule reports whether a Go file imports a package of one
// of the workspaceModules.
func importsWorkspaceModule(src string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly)
	if err != nil {
		return false
	}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		for _, m := range workspaceModules {
			if mp := modulePath + "/" + m; p == mp || strings.HasPrefix(p, mp+"/") {
				return true
			}
		}
	}
	return false
}

func generateFile(s *snippet) (string, kind) {
	k, split := classify(s.body)
	bodyLine := s.line + 1
	if k == wholeFile {
		return lineDirective(s.abs, bodyLine) + strings.Join(s.body, "\n") + "\n", k
	}
	var declPart, stmtPart []string
	stmtLine := bodyLine
	switch k {
	case declsOnly:
		declPart = s.body
	case stmtsOnly, notGo:
		stmtPart = s.body
	case mixed:
		declPart, stmtPart = s.body[:split], s.body[split:]
		stmtLine = bodyLine + split
	}

	n := names{declared: map[string]bool{}, used: map[string]bool{}, imported: map[string]bool{}}
	parse := func(src string) *ast.File {
		f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
		if err != nil {
			return nil // the compiler will report it
		}
		n.add(f)
		return f
	}
	parse("package p\n" + strings.Join(declPart, "\n"))
	parse("package p\n" + s.decls)
	var unused []string
	if stmtPart != nil {
		if f := parse("package p\nfunc _() {\n" + strings.Join(stmtPart, "\n") + "\n}"); f != nil {
			unused = topLevelVars(f)
		}
	}
	var paths []string
	for name := range n.used {
		if p, ok := importTable[name]; ok && !n.declared[name] && !n.imported[name] {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var imports []string
	for _, p := range paths {
		if name := packageName(p); path.Base(p) != name {
			imports = append(imports, name+" "+strconv.Quote(p))
		} else {
			imports = append(imports, strconv.Quote(p))
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "// Code generated by the docsnippets test from %s. DO NOT EDIT.\n\npackage snippet\n\n", s.pos())
	if len(imports) > 0 {
		b.WriteString("import (\n")
		for _, im := range imports {
			b.WriteString("\t" + im + "\n")
		}
		b.WriteString(")\n\n")
	}
	// The fragment's own declarations first: they may start with imports.
	if declPart != nil {
		b.WriteString(lineDirective(s.abs, bodyLine))
		b.WriteString(strings.Join(declPart, "\n") + "\n\n")
	}
	if s.decls != "" {
		b.WriteString(lineDirective(s.abs, s.declsLine))
		b.WriteString(s.decls + "\n\n")
	}
	if stmtPart != nil {
		b.WriteString("func _() {\n")
		b.WriteString(lineDirective(s.abs, stmtLine))
		b.WriteString(strings.Join(stmtPart, "\n") + "\n")
		if len(unused) > 0 {
			b.WriteString(lineDirective("docsnippets-generated.go", 1))
			for _, v := range unused {
				b.WriteString("\t_ = " + v + "\n")
			}
		}
		b.WriteString("}\n")
	}
	return b.String(), k
}

// canary is a snippet that must not compile: if the build does not report
// it, the harness is broken and a pass would mean nothing.
var canary = snippet{
	file: "docsnippets-canary.md", abs: "docsnippets-canary.md", line: 1,
	body: []string{`var n int = "not an int"`},
}

// repoRoot is the directory of the main module's go.mod.
func repoRoot(t *testing.T) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.HasPrefix(gomod, []byte("module "+modulePath+"\n")) {
		t.Fatalf("%s is not the root of %s (go.mod: %v)", root, modulePath, err)
	}
	return root
}

// markdownFiles lists the repository's Markdown files, sorted.
func markdownFiles(t *testing.T, root string) []string {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// goEnv is the environment of the build: offline, in a workspace of the
// main module and workspaceModules, and without a -mod flag (a workspace
// takes none but readonly).
func goEnv(work string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "GOWORK="), strings.HasPrefix(kv, "GOPROXY="), strings.HasPrefix(kv, "GOFLAGS="):
		default:
			env = append(env, kv)
		}
	}
	var flags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if !strings.HasPrefix(f, "-mod=") && !strings.HasPrefix(f, "--mod=") {
			flags = append(flags, f)
		}
	}
	return append(env, "GOWORK="+work, "GOPROXY=off", "GOFLAGS="+strings.Join(flags, " "))
}

// goDirective returns the go line of a go.mod file, as "go1.26.0".
func goDirective(t *testing.T, gomod string) string {
	src, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(src), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "go" {
			return "go" + f[1]
		}
	}
	t.Fatalf("%s has no go line", gomod)
	return ""
}

// removeStale removes generated directories that a killed run left behind.
func removeStale(t *testing.T) {
	old, _ := filepath.Glob("_snippets-*")
	for _, d := range old {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > time.Hour {
			if err := os.RemoveAll(d); err != nil {
				t.Logf("removing %s: %v", d, err)
			}
		}
	}
}

func TestDocSnippetsCompile(t *testing.T) {
	root := repoRoot(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to compile the snippets: %v", err)
	}

	var (
		snippets []snippet
		problems []string
		files    = map[string]bool{}
	)
	for _, abs := range markdownFiles(t, root) {
		src, err := os.ReadFile(abs)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, abs)
		got, probs := extract(filepath.ToSlash(rel), abs, src)
		problems = append(problems, probs...)
		for _, s := range got {
			files[s.file] = true
		}
		snippets = append(snippets, got...)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if len(snippets) == 0 {
		t.Fatalf("no ```go block in the Markdown files under %s", root)
	}

	removeStale(t)
	gen, err := os.MkdirTemp(".", "_snippets-")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("DOCSNIPPETS_KEEP") != "" {
		t.Logf("generated files kept in %s", gen)
	} else {
		t.Cleanup(func() { os.RemoveAll(gen) })
	}
	genAbs, err := filepath.Abs(gen)
	if err != nil {
		t.Fatal(err)
	}
	genRel, _ := filepath.Rel(root, genAbs)
	importBase := modulePath + "/" + filepath.ToSlash(genRel)

	// One package per snippet; pkgs maps import paths to snippets.
	all := append([]snippet{canary}, snippets...)
	pkgs := map[string]*snippet{}
	var dirs, mainDirs []string // every package; those that need no workspace module
	skipped := 0
	for i := range all {
		s := &all[i]
		if s.skip {
			skipped++
			t.Logf("%s: skipped (```go %s)", s.pos(), skipWord)
			continue
		}
		src, k, inWorkspace := generate(s)
		s.notGo = k == notGo
		dir := fmt.Sprintf("s%03d", i)
		if err := os.Mkdir(filepath.Join(gen, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(gen, dir, "snippet.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if testing.Verbose() && s != &all[0] {
			t.Logf("%s: %s", s.pos(), k)
		}
		pkgs[importBase+"/"+dir] = s
		d := "./" + filepath.ToSlash(filepath.Join(genRel, dir))
		dirs = append(dirs, d)
		if !inWorkspace {
			mainDirs = append(mainDirs, d)
		}
	}

	// The workspace: go.work's paths are relative to its own directory.
	rootFromGen, err := filepath.Rel(genAbs, root)
	if err != nil {
		t.Fatal(err)
	}
	goVersion := "go1.21"
	uses := ""
	for _, m := range append([]string{"."}, workspaceModules...) {
		if v := goDirective(t, filepath.Join(root, m, "go.mod")); version.Compare(v, goVersion) > 0 {
			goVersion = v // go.work must not be older than any of its modules
		}
		uses += "\t" + path.Join(filepath.ToSlash(rootFromGen), m) + "\n"
	}
	work := "go " + strings.TrimPrefix(goVersion, "go") + "\n\nuse (\n" + uses + ")\n"
	workFile := filepath.Join(genAbs, "go.work")
	if err := os.WriteFile(workFile, []byte(work), 0o644); err != nil {
		t.Fatal(err)
	}

	failures, stray := build(t, goBin, root, workFile, dirs, pkgs)
	unchecked := 0
	if len(stray) > 0 && missingModules(stray) && len(mainDirs) < len(dirs) {
		// The module cache lacks what a workspace module needs (a fresh
		// machine that has not built it yet): check the rest in the main
		// module alone, and log what went unchecked.
		unchecked = len(dirs) - len(mainDirs)
		if len(stray) > 3 {
			stray = append(stray[:3], "...")
		}
		t.Logf("NOT CHECKED: the %d snippets that import %s, whose dependencies are not in the module cache "+
			"(`cd %s && go mod download` fills it; this test never uses the network):\n\t%s",
			unchecked, strings.Join(workspaceModules, ", "), strings.Join(workspaceModules, ", "),
			strings.Join(stray, "\n\t"))
		failures, stray = build(t, goBin, root, "off", mainDirs, pkgs)
	}
	if len(stray) > 0 {
		msg := strings.Join(stray, "\n")
		if missingModules(stray) {
			msg += "\n\nThe snippets are built offline: run `go mod download` in the repository root (and in " +
				strings.Join(workspaceModules, ", ") + ") to fill the module cache."
		}
		t.Fatalf("go build failed outside the snippets:\n%s", msg)
	}
	if len(failures[&all[0]]) == 0 {
		t.Fatalf("the build did not report the canary (a snippet that cannot compile), so it checked nothing")
	}
	delete(failures, &all[0])
	t.Logf("%d snippets from %d files: %d skipped (```go %s), %d not checked", len(snippets), len(files), skipped, skipWord, unchecked)

	var failed []*snippet
	for s := range failures {
		failed = append(failed, s)
	}
	sort.Slice(failed, func(i, j int) bool {
		if failed[i].file != failed[j].file {
			return failed[i].file < failed[j].file
		}
		return failed[i].line < failed[j].line
	})
	for _, s := range failed {
		msgs := failures[s]
		hint := ""
		if s.notGo {
			hint = "\n\tThe block parses neither as declarations, nor as statements, nor as declarations" +
				"\n\tthen statements; placeholders such as `{ ... }` or a line `...` are not Go."
		}
		for _, m := range msgs {
			if strings.Contains(m, "undefined: ") {
				hint += "\n\tA name the block uses but does not declare goes in a <!-- snippet: var name Type --> comment" +
					"\n\ton the line right before the fence; a package missing from the import table of" +
					"\n\ttestsupport/docsnippets needs an import line in the block (see its package doc)."
				break
			}
		}
		t.Errorf("%s: ```go block does not compile:\n\t%s%s", s.pos(), strings.Join(msgs, "\n\t"), hint)
	}
	if len(failed) > 0 {
		t.Logf("%d of %d snippets do not compile; DOCSNIPPETS_KEEP=1 keeps what was compiled", len(failed), len(snippets)-skipped-unchecked)
	}
}

// build compiles the packages in dirs with one go build in the workspace
// work ("off" for the main module alone) and returns the messages of each
// snippet, and those that belong to none.
func build(t *testing.T, goBin, root, work string, dirs []string, pkgs map[string]*snippet) (map[*snippet][]string, []string) {
	t.Helper()
	// -gcflags=-e: every error of a package, not the first ten.
	cmd := exec.Command(goBin, append([]string{"build", "-gcflags=-e"}, dirs...)...)
	cmd.Dir = root
	cmd.Env = goEnv(work)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	where := "in the workspace of the main module and " + strings.Join(workspaceModules, ", ")
	if work == "off" {
		where = "in the main module alone"
	}
	t.Logf("go build of %d packages %s: %v", len(dirs), where, time.Since(start).Round(time.Millisecond))
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("go build: %v", err)
	}
	return attribute(out, pkgs)
}

// missingModules reports whether go build failed for modules missing from
// the module cache (the build runs with GOPROXY=off).
func missingModules(stray []string) bool {
	for _, l := range stray {
		if strings.Contains(l, "GOPROXY=off") || strings.Contains(l, "module lookup disabled") {
			return true
		}
	}
	return false
}

// attribute splits go build's output into the messages of each snippet's
// package and the lines that belong to none.
func attribute(out []byte, pkgs map[string]*snippet) (map[*snippet][]string, []string) {
	failures := map[*snippet][]string{}
	var stray []string
	var cur *snippet
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "# ") {
			cur = pkgs[strings.TrimPrefix(l, "# ")]
			if cur == nil {
				stray = append(stray, l)
			}
			continue
		}
		if strings.TrimSpace(l) == "" {
			continue
		}
		if cur == nil {
			stray = append(stray, l)
			continue
		}
		failures[cur] = append(failures[cur], strings.TrimPrefix(l, "./"))
	}
	return failures, stray
}
