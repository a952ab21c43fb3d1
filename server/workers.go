package server

import "sync"

// workerPool runs requests on goroutines that outlive one request.
//
// A goroutine per request starts on a small stack and grows it (a copy each
// time it doubles) before the handler has done much: profiles of an echo
// server under 64 callers showed 17% of its CPU in runtime.newstack. A
// worker keeps its grown stack from one request to the next. Idle workers
// wait on their own channel, most recently used first (its stack is warm);
// at most maxIdleWorkers wait, the others exit, and stop (Server.Stop)
// ends the idle ones. This is the scheme of fasthttp's workerpool without
// its idle timer: a burst leaves at most maxIdleWorkers behind until the
// server stops.
type workerPool struct {
	mu      sync.Mutex
	idle    []*worker
	stopped bool
}

type worker struct {
	tasks chan task // capacity 1: a hand-off never blocks
}

// task is what a worker runs: a *request (no allocation to box a pointer).
type task interface{ Run() }

const maxIdleWorkers = 1024

// run starts r.run on an idle worker, or on a new one.
func (p *workerPool) run(r task) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.tasks <- r
		return
	}
	p.mu.Unlock()
	go p.work(r)
}

// work runs r, then every request handed to it while it waits idle.
func (p *workerPool) work(r task) {
	var w *worker
	for {
		r.Run()
		r = nil
		p.mu.Lock()
		if p.stopped || len(p.idle) >= maxIdleWorkers {
			p.mu.Unlock()
			return
		}
		if w == nil {
			w = &worker{tasks: make(chan task, 1)}
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		var ok bool
		if r, ok = <-w.tasks; !ok {
			return
		}
	}
}

// stop ends the idle workers; busy ones end after their request. Requests
// handed over later still run, each on a goroutine of its own.
func (p *workerPool) stop() {
	p.mu.Lock()
	p.stopped = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		close(w.tasks)
	}
}
