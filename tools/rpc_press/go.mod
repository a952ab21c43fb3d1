module github.com/gobrpc/gobrpc/tools/rpc_press

go 1.26

replace github.com/gobrpc/gobrpc => ../..

require (
	github.com/bufbuild/protocompile v0.14.1
	github.com/gobrpc/gobrpc v0.0.0-00010101000000-000000000000
	google.golang.org/protobuf v1.36.12
)

require golang.org/x/sync v0.8.0 // indirect
