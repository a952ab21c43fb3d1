// Command overloadbench runs package overloadbench's benchmark: go run ./cmd/overloadbench -help.
package main

import (
	"fmt"
	"os"

	"github.com/gobrpc/gobrpc/tools/bench/overloadbench"
)

func main() {
	if err := overloadbench.Main(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
