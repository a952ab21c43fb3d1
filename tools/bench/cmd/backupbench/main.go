// Command backupbench runs package backupbench's benchmark: go run ./cmd/backupbench -help.
package main

import (
	"fmt"
	"os"

	"github.com/gobrpc/gobrpc/tools/bench/backupbench"
)

func main() {
	if err := backupbench.Main(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
