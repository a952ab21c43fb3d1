// Package backup decides backup requests: after backup_request_ms without
// an answer, a channel sends the same request to another server and takes
// the first answer. A Policy can choose the delay per RPC, veto a backup
// when it is due, and learn when each RPC ends. RateLimitedPolicy caps
// backups at a ratio of all RPCs over a sliding window, so a latency spike
// downstream cannot turn every call into two.
//
//	p, err := backup.NewRateLimitedPolicy(backup.RateLimitedOptions{
//		BackupRequestMs: -1, MaxBackupRatio: 0.05, WindowSizeSeconds: 10, UpdateIntervalSeconds: 5})
//	if err != nil { ... }
//	defer p.Close()
//	opts := channel.DefaultOptions()
//	opts.BackupRequestMs = 2
//	opts.BackupRequestPolicy = p
//
// Or, per channel without code: opts.BackupRequestMaxRatio = 0.05; or per
// process: --backup_request_max_ratio=0.05.
//
// AdaptivePolicy needs no delay: it sends backups at the latency
// percentile that matches the extra load accepted (MaxExtraLoad 0.05:
// after the p95), held to that share of the completed calls every second.
// opts.BackupRequestMaxExtraLoad = 0.05, or
// --backup_request_max_extra_load=0.05, builds one per channel.
package backup

import (
	"errors"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/flags"
)

// Policy is brpc's BackupRequestPolicy (see controller.BackupPolicy for
// its methods). Set one on channel.Options.BackupRequestPolicy or per RPC
// with Controller.SetBackupRequestPolicy; the caller owns it.
type Policy = controller.BackupPolicy

// The flags proposed in brpc issue 3228. All three are reloadable: a new
// value applies to channels initialized afterwards.
var (
	// MaxRatioFlag is -backup_request_max_ratio: -1 (no limit) or (0, 1],
	// used by channels whose Options.BackupRequestMaxRatio is -1 or 0.
	MaxRatioFlag = flags.DefineFloat64("backup_request_max_ratio", -1,
		"Max ratio of backup requests to all requests over a sliding window, in (0, 1]; -1 means no limit",
		func(v float64) error {
			if v == -1 || (v > 0 && v <= 1) {
				return nil
			}
			return errors.New("must be -1 or in (0, 1]")
		})
	// WindowSizeFlag is -backup_request_ratio_window_size_s.
	WindowSizeFlag = flags.DefineInt32("backup_request_ratio_window_size_s", 10,
		"Window in seconds over which the backup request ratio is computed, in [1, 3600]",
		func(v int32) error {
			if v < 1 || v > 3600 {
				return errors.New("must be in [1, 3600]")
			}
			return nil
		})
	// UpdateIntervalFlag is -backup_request_ratio_update_interval_s.
	UpdateIntervalFlag = flags.DefineInt32("backup_request_ratio_update_interval_s", 5,
		"Seconds between two refreshes of the cached backup request ratio, >= 1",
		func(v int32) error {
			if v < 1 {
				return errors.New("must be >= 1")
			}
			return nil
		})
	// MaxExtraLoadFlag is -backup_request_max_extra_load: -1 (off) or
	// [0.0001, 1], used by channels whose Options set neither a policy, nor a
	// ratio, nor BackupRequestMaxExtraLoad: they build an AdaptivePolicy
	// with this MaxExtraLoad (no backup_request_ms needed).
	MaxExtraLoadFlag = flags.DefineFloat64("backup_request_max_extra_load", -1,
		"Send backups with a delay picked from recent latencies so that at most this share of extra requests goes out, in [0.0001, 1]; -1 means off",
		func(v float64) error {
			if v == -1 || (v >= MinExtraLoad && v <= 1) {
				return nil
			}
			return errors.New("must be -1 or in [0.0001, 1]")
		})
	// StrictFlag is -backup_request_ratio_strict, read when a channel
	// builds its policy: see RateLimitedOptions.Strict.
	StrictFlag = flags.DefineBool("backup_request_ratio_strict", false,
		"Also cap backups in each second at max(1, max ratio x RPCs completed so far in that second)",
		func(bool) error { return nil })
)
