package naming_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gobrpc/gobrpc/naming"
)

func ExampleStart() {
	ns, err := naming.Start("list://127.0.0.1:8000 1,127.0.0.1:8001 2,127.0.0.1:8000 1",
		naming.WatcherFunc(func(nodes []naming.Node) { fmt.Println(nodes) }))
	if err != nil {
		panic(err)
	}
	defer ns.Close()
	// Output: [{127.0.0.1:8000 1} {127.0.0.1:8001 2}]
}

// A naming service of your own that polls something: NewPeriodic does the
// timing, the change detection and the error handling.
func ExampleNewPeriodic() {
	fetch := func(ctx context.Context) ([]naming.Node, error) {
		return []naming.Node{{Addr: "10.0.0.1:8000"}}, nil // ask your registry here
	}
	ns := naming.NewPeriodic(fetch, func() time.Duration { return 10 * time.Second },
		naming.WatcherFunc(func(nodes []naming.Node) { fmt.Println(nodes) }))
	defer ns.Close()
	// Output: [{10.0.0.1:8000 }]
}
