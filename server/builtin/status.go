package builtin

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gobrpc/gobrpc/bvar"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The index, /status, /connections, /health and /version.

func (p *Pages) serveIndex(w http.ResponseWriter, r *http.Request, _ string) {
	addr := "<listen_address>"
	if a := p.srv.ListenAddress(); a != nil {
		addr = a.String()
	}
	var b strings.Builder
	if !useHTML(r) {
		b.WriteString("gobrpc builtin services\n\n")
		for _, pg := range pages {
			path := "/" + pg.name
			if pg.name == "pprof" {
				path += "/"
			}
			b.WriteString(path + " : " + pg.about + "\n")
		}
		b.WriteString("curl -H 'Content-Type: application/json' -d 'JSON' " + addr +
			"/ServiceName/MethodName : Call method by http+json\n")
		reply(w, r, contentText, b.String(), false)
		return
	}
	writeHead(&b, "gobrpc", "")
	b.WriteString("<h3>gobrpc builtin services</h3>\n<table class=\"grid\">\n")
	for _, pg := range pages {
		path := "/" + pg.name
		if pg.name == "pprof" {
			path += "/"
		}
		b.WriteString(`<tr><td><a href="` + path + `">` + path + "</a></td><td>" + esc(pg.about) + "</td></tr>\n")
	}
	b.WriteString("</table>\n<p class=\"mono\">curl -H 'Content-Type: application/json' -d 'JSON' " + esc(addr) +
		"/ServiceName/MethodName : Call method by http+json</p>\n")
	writeTail(&b)
	reply(w, r, contentHTML, b.String(), false)
}

// methodSignature is "Echo (EchoRequest) returns (EchoResponse)".
func methodSignature(md protoreflect.MethodDescriptor) string {
	if md == nil {
		return ""
	}
	return string(md.Name()) + " (" + string(md.Input().Name()) + ") returns (" + string(md.Output().Name()) + ")"
}

// methodDescriptor finds a method of a service by its full name.
func methodDescriptor(sd protoreflect.ServiceDescriptor, fullName string) protoreflect.MethodDescriptor {
	if sd == nil {
		return nil
	}
	i := strings.LastIndexByte(fullName, '.')
	return sd.Methods().ByName(protoreflect.Name(fullName[i+1:]))
}

// percentileSuffixes are the LatencyRecorder percentiles /status shows in
// plain text, read from the method's bvars.
var percentileSuffixes = []string{"_latency_80", "_latency_90", "_latency_99", "_latency_999", "_latency_9999"}

// serveStatus is brpc's /status: the server, then each service and its
// methods with their statistics. Plain text:
//
//	version: 1.0
//	start_time: 2025/01/02-15:04:05
//	connection_count: 3
//	concurrency: 0
//
//	[example.EchoService]
//
//	Echo (EchoRequest) returns (EchoResponse)
//	count: 12
//	qps: 3
//	error: 0
//	latency: 120
//	latency_80: 150
//	...
//	max_latency: 900
//	concurrency: 0
//	max_concurrency: unlimited
func (p *Pages) serveStatus(w http.ResponseWriter, r *http.Request, _ string) {
	services := p.srv.Services()
	conns := p.srv.Connections()
	var concurrency int64
	for _, s := range services {
		for _, m := range s.Methods {
			concurrency += m.Concurrency
		}
	}
	version := p.srv.Version()
	if version == "" {
		version = "unknown"
	}
	start := p.srv.StartTime()
	var b strings.Builder
	if !useHTML(r) {
		b.WriteString("version: " + version + "\n")
		if !start.IsZero() {
			b.WriteString("start_time: " + start.Format("2006/01/02-15:04:05") + "\n")
			b.WriteString("uptime: " + time.Since(start).Truncate(time.Second).String() + "\n")
		}
		b.WriteString("connection_count: " + strconv.Itoa(len(conns)) + "\n")
		b.WriteString("concurrency: " + strconv.FormatInt(concurrency, 10) + "\n")
		for _, s := range services {
			b.WriteString("\n[" + serviceName(s) + "]\n")
			for _, m := range s.Methods {
				b.WriteString("\n" + orName(methodSignature(methodDescriptor(s.Descriptor, m.FullName)), m.FullName) + "\n")
				line := func(k, v string) { b.WriteString(k + ": " + v + "\n") }
				line("count", strconv.FormatInt(m.Count, 10))
				line("qps", formatQPS(m.QPS))
				line("error", strconv.FormatInt(m.Errors, 10))
				line("latency", strconv.FormatInt(m.LatencyUs, 10))
				if m.VarPrefix != "" {
					for _, suf := range percentileSuffixes {
						if v, ok := bvar.Describe(m.VarPrefix + suf); ok {
							line(suf[1:], v)
						}
					}
				}
				line("max_latency", strconv.FormatInt(m.MaxLatencyUs, 10))
				line("concurrency", strconv.FormatInt(m.Concurrency, 10))
				line("max_concurrency", orName(m.MaxConcurrency, "unlimited"))
			}
		}
		reply(w, r, contentText, b.String(), true)
		return
	}

	writeHead(&b, "status", "status")
	b.WriteString(`<table class="grid"><tr><th>version</th><td>` + esc(version) + "</td></tr>")
	if !start.IsZero() {
		b.WriteString("<tr><th>start_time</th><td>" + start.Format("2006/01/02-15:04:05") + " (up " +
			time.Since(start).Truncate(time.Second).String() + ")</td></tr>")
	}
	b.WriteString(`<tr><th>connection_count</th><td><a href="/connections">` + strconv.Itoa(len(conns)) + "</a></td></tr>")
	b.WriteString("<tr><th>concurrency</th><td>" + strconv.FormatInt(concurrency, 10) + "</td></tr></table>\n")
	var names []string
	for _, s := range services {
		for _, m := range s.Methods {
			if m.VarPrefix != "" {
				names = append(names, m.VarPrefix+"_qps", m.VarPrefix+"_latency")
			}
		}
	}
	hists := p.hist.getAll(names)
	for _, s := range services {
		sn := serviceName(s)
		b.WriteString(`<h3><a href="/protobufs/` + esc(sn) + `">` + esc(sn) + "</a></h3>\n")
		b.WriteString(`<table class="grid"><tr><th>method</th><th>count</th><th>error</th><th>qps</th>` +
			`<th>latency (us)</th><th>max latency (us)</th><th>concurrency</th><th>max concurrency</th>` +
			`<th>qps, last 60 s</th><th>latency, last 60 s</th></tr>` + "\n")
		for _, m := range s.Methods {
			b.WriteString(`<tr><td class="method">`)
			if md := methodDescriptor(s.Descriptor, m.FullName); md != nil {
				b.WriteString(esc(string(md.Name())) + ` (<a href="/protobufs/` + esc(string(md.Input().FullName())) + `">` +
					esc(string(md.Input().Name())) + `</a>) returns (<a href="/protobufs/` + esc(string(md.Output().FullName())) +
					`">` + esc(string(md.Output().Name())) + "</a>)")
			} else {
				b.WriteString(esc(m.FullName))
			}
			if m.VarPrefix != "" {
				b.WriteString(`<br><a href="/vars/` + esc(m.VarPrefix) + `_*">[vars]</a>`)
				if _, ok := bvar.Find(m.VarPrefix + "_latency_cdf"); ok {
					b.WriteString(` <a href="/vars/` + esc(m.VarPrefix) + `_latency_cdf?expand">[latency cdf]</a>`)
				}
			}
			b.WriteString("</td>")
			cell := func(v string) { b.WriteString(`<td class="num">` + esc(v) + "</td>") }
			cell(strconv.FormatInt(m.Count, 10))
			cell(strconv.FormatInt(m.Errors, 10))
			cell(formatQPS(m.QPS))
			cell(strconv.FormatInt(m.LatencyUs, 10))
			cell(strconv.FormatInt(m.MaxLatencyUs, 10))
			cell(strconv.FormatInt(m.Concurrency, 10))
			cell(orName(m.MaxConcurrency, "unlimited"))
			for _, suffix := range []string{"_qps", "_latency"} {
				b.WriteString("<td>")
				if h, ok := hists[m.VarPrefix+suffix]; ok {
					writeSparkline(&b, m.VarPrefix+suffix+": last 60 seconds", h.Seconds, historyLen, "-60s")
				}
				b.WriteString("</td>")
			}
			b.WriteString("</tr>\n")
		}
		b.WriteString("</table>\n")
	}
	writeTail(&b)
	reply(w, r, contentHTML, b.String(), true)
}

func serviceName(s ServiceStatus) string {
	if s.Descriptor == nil {
		return "unknown"
	}
	return string(s.Descriptor.FullName())
}

func orName(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// formatQPS prints a rate: an integer when it is one, else 3 decimals at most.
func formatQPS(q float64) string { return trimFloat(q, 3) }

// serveConnections lists the server's connections, brpc's layout cut to
// the columns gobrpc knows:
//
//	CreatedTime               |RemoteSide         |LocalSide          |Protocol    |InFlight
//	2025/01/02-15:04:05.123456|127.0.0.1:53412    |127.0.0.1:8000     |baidu_std   |0
func (p *Pages) serveConnections(w http.ResponseWriter, r *http.Request, _ string) {
	conns := p.srv.Connections()
	var b strings.Builder
	if !useHTML(r) {
		b.WriteString("CreatedTime               |RemoteSide         |LocalSide          |Protocol    |InFlight\n")
		for _, c := range conns {
			fmt.Fprintf(&b, "%-26s|%-19s|%-19s|%-12s|%d\n", formatCreated(c.Created), addrString(c.Remote),
				addrString(c.Local), orName(c.Protocol, "-"), c.InFlight)
		}
		reply(w, r, contentText, b.String(), true)
		return
	}
	writeHead(&b, "connections", "connections")
	b.WriteString("<p>" + strconv.Itoa(len(conns)) + " connections</p>\n")
	b.WriteString(`<table class="grid"><tr><th>CreatedTime</th><th>RemoteSide</th><th>LocalSide</th><th>Protocol</th><th>InFlight</th></tr>` + "\n")
	for _, c := range conns {
		b.WriteString("<tr><td>" + esc(formatCreated(c.Created)) + "</td><td>" + esc(addrString(c.Remote)) + "</td><td>" +
			esc(addrString(c.Local)) + "</td><td>" + esc(orName(c.Protocol, "-")) + `</td><td class="num">` +
			strconv.FormatInt(c.InFlight, 10) + "</td></tr>\n")
	}
	b.WriteString("</table>\n")
	writeTail(&b)
	reply(w, r, contentHTML, b.String(), true)
}

// formatCreated prints a time as brpc's PrintRealDateTime does.
func formatCreated(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("2006/01/02-15:04:05.000000")
}

func addrString(a net.Addr) string {
	if a == nil {
		return "-"
	}
	return a.String()
}

// serveHealth answers "OK", or what Server.Health reports.
func (p *Pages) serveHealth(w http.ResponseWriter, r *http.Request, _ string) {
	reply(w, r, contentText, orName(p.srv.Health(), "OK"), false)
}

// serveVersion answers Server.Version, "unknown" when empty.
func (p *Pages) serveVersion(w http.ResponseWriter, r *http.Request, _ string) {
	reply(w, r, contentText, orName(p.srv.Version(), "unknown"), false)
}
