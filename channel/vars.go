package channel

import (
	"fmt"
	"sync"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/flags"
)

// ShowLBInVars is brpc's -show_lb_in_vars: expose each channel's load
// balancer state (for "la": every server's weight) as a bvar. Read when a
// channel is initialized.
var ShowLBInVars = flags.DefineBool("show_lb_in_vars", false,
	"Describe LoadBalancers in vars", func(bool) error { return nil })

// clusterServer is a channel's view of one server of its cluster: the
// shared endpoint (connections, health) and this channel's counters,
// exposed as rpc_channel_<n>_<ip_port>_selected and _error.
type clusterServer struct {
	ep       endpoint
	selected *bvar.Adder[int64]
	errors   *bvar.Adder[int64]
}

var channelSeq = struct {
	sync.Mutex
	n int
}{}

// nextVarPrefix names a cluster channel's variables: rpc_channel_<n>, n
// counting channels in this process (targets repeat, so they cannot be
// names).
func nextVarPrefix() string {
	channelSeq.Lock()
	defer channelSeq.Unlock()
	channelSeq.n++
	return fmt.Sprintf("rpc_channel_%d", channelSeq.n)
}

func newClusterServer(prefix, addr string, ep endpoint) *clusterServer {
	cs := &clusterServer{ep: ep, selected: bvar.NewAdder[int64](""), errors: bvar.NewAdder[int64]("")}
	// A node listed twice with two tags shares its name: the second stays
	// unexposed (Expose refuses, and the counters still work).
	_ = cs.selected.ExposeAs(prefix+"_"+addr, "selected")
	_ = cs.errors.ExposeAs(prefix+"_"+addr, "error")
	return cs
}

func (cs *clusterServer) hide() {
	cs.selected.Hide()
	cs.errors.Hide()
}

// describer is implemented by balancers that can show their state.
type describer interface {
	Describe() string
}

// lbVar exposes the channel's balancer state (show_lb_in_vars).
type lbVar struct {
	v *bvar.PassiveStatus[string]
}

func exposeLB(prefix string, lb any) *lbVar {
	d, ok := lb.(describer)
	if !ok || !ShowLBInVars.Get() {
		return nil
	}
	v, err := bvar.NewPassiveStatus(prefix+"_lb", d.Describe)
	if err != nil {
		return nil
	}
	return &lbVar{v: v}
}

func (l *lbVar) hide() {
	if l != nil {
		l.v.Hide()
	}
}

// channelVars are what every Channel and SelectiveChannel exposes about
// its backups: rpc_channel_<n>_backup_sent, _backup_won (the backup
// answered first), _backup_refused (the policy vetoed it) and, once a
// backup was sent, _backup_lateness_* (how long after its due time each
// backup left, in µs: a LatencyRecorder).
type channelVars struct {
	prefix                string
	backupSent, backupWon *bvar.Adder[int64]
	backupRefused         *bvar.Adder[int64]

	lateOnce sync.Once
	late     *bvar.LatencyRecorder
}

// closedLateness takes what backups of a closed channel record.
var closedLateness = sync.OnceValue(func() *bvar.LatencyRecorder {
	r := bvar.NewLatencyRecorder("")
	r.Close()
	return r
})

// backupLateness is made with the first backup: most channels send none.
func (v *channelVars) backupLateness() *bvar.LatencyRecorder {
	v.lateOnce.Do(func() { v.late = bvar.NewLatencyRecorder(v.prefix + "_backup_lateness") })
	return v.late
}

func newChannelVars() *channelVars {
	prefix := nextVarPrefix()
	v := &channelVars{
		prefix:        prefix,
		backupSent:    bvar.NewAdder[int64](prefix + "_backup_sent"),
		backupWon:     bvar.NewAdder[int64](prefix + "_backup_won"),
		backupRefused: bvar.NewAdder[int64](prefix + "_backup_refused"),
	}
	return v
}

func (v *channelVars) hide() {
	if v == nil {
		return
	}
	v.backupSent.Hide()
	v.backupWon.Hide()
	v.backupRefused.Hide()
	closed := false
	v.lateOnce.Do(func() { v.late, closed = closedLateness(), true }) // a late backup records unseen
	if !closed {
		v.late.Close()
	}
}
