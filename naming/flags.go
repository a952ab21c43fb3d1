package naming

import (
	"time"

	"github.com/gobrpc/gobrpc/flags"
)

// nsAccessInterval is brpc's -ns_access_interval. Reloadable: a periodic
// naming service reads it again before every wait, so a change takes
// effect from the next cycle.
var nsAccessInterval = flags.DefineInt32("ns_access_interval", 5,
	"Wait so many seconds before next access to naming service", flags.Positive[int32])

// flagInterval is the wait between two fetches of a periodic naming service.
func flagInterval() time.Duration {
	return time.Duration(nsAccessInterval.Get()) * time.Second
}

// accessInterval is what dns:// and http:// use; tests swap it for
// sub-second intervals (the flag counts whole seconds).
var accessInterval = flagInterval
