module github.com/gobrpc/gobrpc/tools/bench

go 1.26.0

replace github.com/gobrpc/gobrpc => ../..

require (
	github.com/gobrpc/gobrpc v0.0.0-00010101000000-000000000000 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/common v0.74.0 // indirect
)
