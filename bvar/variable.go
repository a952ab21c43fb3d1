package bvar

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

// Variable is a value that can be exposed under a name and read as text.
type Variable interface {
	// Name is the exposed name, "" when not exposed.
	Name() string
	// Describe formats the current value as /vars shows it (strings are
	// double-quoted).
	Describe() string
}

// registry holds every exposed variable by name.
var registry = struct {
	sync.RWMutex
	vars map[string]Variable
}{vars: map[string]Variable{}}

// exposed is embedded in every variable type: it owns the variable's name
// and its place in the registry.
type exposed struct {
	mu   sync.Mutex
	name string
}

// Name is the exposed name, "" when not exposed.
func (e *exposed) Name() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.name
}

// expose registers self under the normalized form of prefix and name, as
// brpc's Variable::expose_as does. A variable already exposed is first
// hidden; a name already taken is refused.
func (e *exposed) expose(self Variable, prefix, name string) error {
	if name == "" {
		return errors.New("bvar: cannot expose a variable with an empty name")
	}
	full := ""
	if prefix != "" {
		full = ToUnderscoredName(prefix)
		if full != "" && !strings.HasSuffix(full, "_") {
			full += "_"
		}
	}
	full += ToUnderscoredName(name)
	e.mu.Lock()
	defer e.mu.Unlock()
	registry.Lock()
	defer registry.Unlock()
	if e.name != "" {
		if registry.vars[e.name] == self {
			delete(registry.vars, e.name)
		}
		e.name = ""
	}
	if _, taken := registry.vars[full]; taken {
		return fmt.Errorf("bvar: a variable named %q is already exposed", full)
	}
	registry.vars[full] = self
	e.name = full
	return nil
}

// Hide removes the variable from the registry; it keeps working.
func (e *exposed) Hide() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.name == "" {
		return
	}
	registry.Lock()
	delete(registry.vars, e.name)
	registry.Unlock()
	e.name = ""
}

// exposeOrLog is what constructors do with a name: an empty one means "not
// exposed"; a refused one is logged, as brpc's constructors do, and the
// variable still works unexposed (call Expose to get the error instead).
func exposeOrLog(e *exposed, self Variable, prefix, name string) {
	if name == "" {
		return
	}
	if err := e.expose(self, prefix, name); err != nil {
		slog.Error(err.Error())
	}
}

// ToUnderscoredName normalizes a name as brpc does: letters are lowercased
// with an underscore before an uppercase letter that follows a
// non-uppercase one, digits are kept, and every run of other characters
// becomes one underscore. "example.EchoService.Echo" becomes
// "example_echo_service_echo" and "HTTPServer" becomes "httpserver".
func ToUnderscoredName(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	last := func() byte {
		if b.Len() == 0 {
			return 0
		}
		return b.String()[b.Len()-1]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			if i > 0 && !(s[i-1] >= 'A' && s[i-1] <= 'Z') && last() != '_' {
				b.WriteByte('_')
			}
			b.WriteByte(c - 'A' + 'a')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteByte(c)
		default:
			if b.Len() == 0 || last() != '_' {
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// List returns the names of every exposed variable, sorted.
func List() []string {
	registry.RLock()
	names := make([]string, 0, len(registry.vars))
	for n := range registry.vars {
		names = append(names, n)
	}
	registry.RUnlock()
	sort.Strings(names)
	return names
}

// Find returns the exposed variable with that name.
func Find(name string) (Variable, bool) {
	registry.RLock()
	defer registry.RUnlock()
	v, ok := registry.vars[name]
	return v, ok
}

// Describe returns the value of the exposed variable with that name.
func Describe(name string) (string, bool) {
	v, ok := Find(name)
	if !ok {
		return "", false
	}
	return v.Describe(), true
}

// Dump writes "name : value\r\n" for every exposed variable matching
// filter (see ParseFilter; "" matches all), sorted by name, as brpc's /vars
// and dump files do. It returns how many lines it wrote.
func Dump(w io.Writer, filter string) (int, error) {
	f, err := ParseFilter(filter)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range List() {
		if !f.Match(name) {
			continue
		}
		v, ok := Find(name)
		if !ok { // hidden meanwhile
			continue
		}
		if _, err := io.WriteString(w, name+" : "+v.Describe()+"\r\n"); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Filter selects variable names: brpc's /vars filter syntax.
type Filter struct {
	exact     map[string]bool
	wildcards []string
}

// ParseFilter parses items separated by ',' or ';'. An item containing '*'
// (any run of characters) or '$' (exactly one character) is a wildcard;
// any other item is an exact name. "" matches everything. Items may only
// use the characters of variable names plus the two wildcards.
func ParseFilter(s string) (*Filter, error) {
	f := &Filter{}
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	f.exact = map[string]bool{}
	for _, item := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' }) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		for i := 0; i < len(item); i++ {
			c := item[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '*' || c == '$') {
				return nil, fmt.Errorf("bvar: invalid character %q in filter item %q (names use letters, digits and '_'; wildcards are '*' and '$')", c, item)
			}
		}
		if strings.ContainsAny(item, "*$") {
			f.wildcards = append(f.wildcards, item)
		} else {
			f.exact[item] = true
		}
	}
	if len(f.exact) == 0 && len(f.wildcards) == 0 {
		return nil, fmt.Errorf("bvar: filter %q has no item", s)
	}
	return f, nil
}

// Match reports whether name is selected.
func (f *Filter) Match(name string) bool {
	if f == nil || f.exact == nil {
		return true
	}
	if f.exact[name] {
		return true
	}
	for _, w := range f.wildcards {
		if WildcardMatch(w, name) {
			return true
		}
	}
	return false
}

// WildcardMatch matches s against a pattern of brpc's filters: '*' is
// any run of characters, '$' exactly one (brpc's url_wildcmp). It
// backtracks only to the last '*', so it runs in linear time.
func WildcardMatch(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '$' || pattern[p] == s[i]):
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
