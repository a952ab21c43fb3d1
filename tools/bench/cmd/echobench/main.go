// Command echobench runs package echobench's benchmark: go run ./cmd/echobench -help.
package main

import (
	"fmt"
	"os"

	"github.com/gobrpc/gobrpc/tools/bench/echobench"
)

func main() {
	if err := echobench.Main(nil, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
