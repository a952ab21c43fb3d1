// Package docsnippets checks that every Go snippet in gobrpc's documentation
// compiles. It has no code of its own: its test reads every ```go block of
// every Markdown file of the repository (README.md, docs/en, docs/cn, the
// READMEs of tools/ and example/; directories named testdata, or starting
// with "." or "_", are left out), writes each as a package of its own into a
// temporary directory here (testsupport/docsnippets/_snippets-*, ignored by
// git and by ./... patterns), and compiles them all with one `go build`,
// offline (GOPROXY=off). A block that does not compile fails the test, which
// reports it as file:line of the Markdown file, with the compiler's message
// at the line of the snippet.
//
// # How a block is compiled
//
// A block whose first line (after comments) is a package clause is a whole
// file and is compiled as it is.
//
// Any other block is a fragment. It may be
//   - top-level declarations (types, functions, methods, vars, imports),
//   - statements, which go into the body of a function without parameters
//     or results, or
//   - declarations followed by statements (a type and its methods, then the
//     code that uses them).
//
// A fragment needs no import lines: a name used as pkg.X that the fragment
// does not declare is imported from a fixed table (importTable in the
// test; add a package there, or write its import line in the block): gobrpc's channel, controller, server, limiter (server/limiter),
// builtin (server/builtin), auth, backup, bvar, errno, rpc, naming, etcdnaming (naming/etcd),
// loadbalancer, flags, rpcz, the example's echopb, protobuf's proto, and the
// usual standard packages (context, errors, fmt, log, time, net, http,
// slog, ...). Imports a fragment writes itself are kept. Variables a
// statement fragment declares at its top level and never uses are not an
// error (the test adds `_ = v`); fragments stand for a part of a program.
//
// # Names a fragment uses but does not declare
//
// Write them as Go declarations in an HTML comment on the line right before
// the fence. The comment does not show on the rendered page; its
// declarations are compiled at package level with the fragment:
//
//	<!-- snippet: var ch channel.Channel; var opts channel.Options -->
//	```go
//	if err := ch.Init("127.0.0.1:8000", "", &opts); err != nil { log.Fatal(err) }
//	```
//
// The comment may span lines (for a type with methods, say). Without it, a
// free name fails the build with "undefined: name". Placeholders such as
// `{ ... }` are not Go: write the real code (`{ log.Fatal(err) }`,
// `{ return 0 }`) or a comment (`// ... register services ...`).
//
// # Blocks that cannot compile
//
// Prefer compiling every block. A block that cannot (output, or code for a
// module the test's workspace does not hold) opts out with a word after the
// language in its fence, ```go skip-compile; the test logs every block it
// skips. Blocks of other languages (```sh, ```proto, ```text, plain ```) are
// not checked.
//
// The snippets are built in a go.work workspace of the main module and
// naming/etcd (a module of its own, see workspaceModules in the test), so
// blocks may use etcdnaming. The build runs with GOPROXY=off: it needs the
// modules in the module cache, and never the network. On a machine whose
// cache lacks naming/etcd's dependencies (`cd naming/etcd && go mod
// download` fills it), the blocks that import it are left out and the test
// logs them as NOT CHECKED; every other block is still compiled.
//
// So that a pass means something, the build also compiles a canary, a
// snippet that must not compile; the test fails if the build does not
// report it.
//
// Run it with
//
//	go test ./testsupport/docsnippets/
//
// DOCSNIPPETS_KEEP=1 keeps the generated directory for a look at what was
// compiled.
package docsnippets
