package builtin

import (
	"flag"
	"net/http"
	"sort"
	"strings"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/flags"
)

// /flags, as brpc's flags_service.cpp:
//
//	/flags                    every flag
//	/flags/NAME1,NAME2;P*     the named ones and those matching wildcards
//	/flags/NAME?setvalue=V    change a reloadable flag
//
// Plain text: "Name | Value | Description | Defined At", a dashed line, then
// one row a flag: "name[ (R)] | value[ (default:X)] | description | file".
// (R) marks a reloadable flag: a gobrpc flag with a validator. gobrpc's
// flags (package flags) are listed with Go's other flags on
// flag.CommandLine, which are never reloadable.

// flagInfo is one row.
type flagInfo struct {
	name, value, def, usage, definedAt string
	reloadable                         bool
	set                                func(string) error
}

// The "Defined At" column: brpc prints the defining file. gobrpc's flags
// do not record it (yet): a flag that has a DefinedAt method shows what it
// returns, the others "gobrpc"; Go's other flags show "flag.CommandLine".
const (
	definedGobrpc = "gobrpc"
	definedGo     = "flag.CommandLine"
)

func infoOf(v flags.Value) flagInfo {
	at := definedGobrpc
	if d, ok := v.(interface{ DefinedAt() string }); ok && d.DefinedAt() != "" {
		at = d.DefinedAt()
	}
	return flagInfo{name: v.Name(), value: v.String(), def: v.DefaultString(), usage: v.Usage(),
		definedAt: at, reloadable: v.Reloadable(), set: v.Set}
}

func infoOfGo(f *flag.Flag) flagInfo {
	return flagInfo{name: f.Name, value: f.Value.String(), def: f.DefValue, usage: f.Usage,
		definedAt: definedGo, set: f.Value.Set}
}

// lookupFlag finds a flag by name, gobrpc's first.
func lookupFlag(name string) (flagInfo, bool) {
	if v, ok := flags.Lookup(name); ok {
		return infoOf(v), true
	}
	if f := flag.CommandLine.Lookup(name); f != nil {
		return infoOfGo(f), true
	}
	return flagInfo{}, false
}

// allFlags returns every flag, sorted by name.
func allFlags() []flagInfo {
	var out []flagInfo
	seen := map[string]bool{}
	for _, v := range flags.All() {
		out = append(out, infoOf(v))
		seen[v.Name()] = true
	}
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if !seen[f.Name] {
			out = append(out, infoOfGo(f))
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (p *Pages) serveFlags(w http.ResponseWriter, r *http.Request, constraint string) {
	asHTML := useHTML(r)
	if vs, ok := r.URL.Query()["setvalue"]; ok {
		p.setFlag(w, r, constraint, vs[0], asHTML)
		return
	}

	// The constraint: exact names and wildcards, separated by ',' or ';'.
	var rows []flagInfo
	if constraint == "" {
		rows = allFlags()
	} else {
		exact := map[string]bool{}
		var wildcards []string
		for _, item := range strings.FieldsFunc(constraint, func(r rune) bool { return r == ',' || r == ';' }) {
			if strings.ContainsAny(item, "*$") {
				wildcards = append(wildcards, item)
			} else {
				exact[item] = true
			}
		}
		if len(wildcards) == 0 { // only exact names: look them up, sorted
			names := make([]string, 0, len(exact))
			for n := range exact {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if fi, ok := lookupFlag(n); ok {
					rows = append(rows, fi)
				}
			}
		} else {
			for _, fi := range allFlags() {
				if exact[fi.name] || matchAny(wildcards, fi.name) {
					rows = append(rows, fi)
				}
			}
		}
	}

	var b strings.Builder
	if !asHTML {
		b.WriteString("Name | Value | Description | Defined At\n---------------------------------------\n")
		for _, fi := range rows {
			b.WriteString(fi.name)
			if fi.reloadable {
				b.WriteString(" (R)")
			}
			b.WriteString(" | ")
			if fi.value != "" {
				b.WriteString(fi.value)
			} else {
				b.WriteString(" ")
			}
			if fi.value != fi.def {
				b.WriteString(" (default:" + fi.def + ")")
			}
			b.WriteString(" | " + fi.usage + " | " + fi.definedAt + "\n")
		}
		reply(w, r, contentText, b.String(), true)
		return
	}
	writeHead(&b, "flags", "flags")
	b.WriteString(`<p class="hint">(R): reloadable, click it to change the value. Values in red differ from their defaults.</p>` + "\n")
	b.WriteString(`<table class="grid"><tr><th>Name</th><th>Value</th><th>Description</th><th>Defined At</th></tr>` + "\n")
	for _, fi := range rows {
		b.WriteString("<tr><td>" + esc(fi.name))
		if fi.reloadable {
			b.WriteString(` (<a href="/flags/` + esc(fi.name) + `?setvalue&amp;withform">R</a>)`)
		}
		b.WriteString("</td><td>")
		nondefault := fi.value != fi.def
		if nondefault {
			b.WriteString(`<span class="nondefault">`)
		}
		if fi.value != "" {
			b.WriteString(esc(fi.value))
		} else {
			b.WriteString("&nbsp;")
		}
		if nondefault {
			b.WriteString(" (default:" + esc(fi.def) + ")</span>")
		}
		b.WriteString("</td><td>" + esc(fi.usage) + "</td><td>" + esc(fi.definedAt) + "</td></tr>\n")
	}
	b.WriteString("</table>\n")
	writeTail(&b)
	reply(w, r, contentHTML, b.String(), true)
}

// setFlag is /flags/NAME?setvalue=V, checked in brpc's order.
func (p *Pages) setFlag(w http.ResponseWriter, r *http.Request, name, value string, asHTML bool) {
	if name == "" {
		fail(w, controller.ENOMETHOD, "Require gflag name")
		return
	}
	fi, ok := lookupFlag(name)
	if !ok {
		fail(w, controller.ENOMETHOD, "No such gflag")
		return
	}
	if asHTML && hasQuery(r, "withform") {
		var b strings.Builder
		writeHead(&b, "set "+name, "flags")
		b.WriteString(`<form action="" method="get">Set <span class="mono">` + esc(name) + "</span> from <span class=\"mono\">" +
			esc(fi.value) + `</span> to <input name="setvalue" value="" autofocus> <button>go</button></form>` + "\n")
		if !fi.reloadable {
			b.WriteString(`<p class="hint">This flag is not reloadable: the change will be refused.</p>`)
		} else if !p.opts.AllowSetFlags {
			b.WriteString(`<p class="hint">Flags cannot be changed on this port: use the server's internal port.</p>`)
		}
		writeTail(&b)
		reply(w, r, contentHTML, b.String(), false)
		return
	}
	if !fi.reloadable {
		fail(w, controller.EPERM, "A reloadable gflag must have validator")
		return
	}
	if !p.opts.AllowSetFlags {
		fail(w, controller.EPERM, "Cannot modify `%s' on this port: use the server's internal port", name)
		return
	}
	if err := fi.set(value); err != nil {
		shown := value
		if shown == "" {
			shown = "empty string"
		}
		fail(w, controller.EPERM, "Fail to set `%s' to %s", name, shown)
		return
	}
	if asHTML {
		reply(w, r, contentHTML, "Set `"+esc(name)+"' to "+esc(value)+"<br><a href='/flags'>[back to flags]</a>", false)
		return
	}
	reply(w, r, contentText, "Set `"+name+"' to "+value, false)
}

func matchAny(wildcards []string, name string) bool {
	for _, w := range wildcards {
		if bvar.WildcardMatch(w, name) {
			return true
		}
	}
	return false
}
