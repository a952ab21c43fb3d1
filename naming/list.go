package naming

import (
	"context"
	"strings"
)

func init() { Register("list", listBuilder{}) }

// listBuilder is brpc's ListNamingService: "list://addr[ tag],addr[ tag]".
// The list never changes, so Build delivers it once and nothing runs.
type listBuilder struct{}

func (listBuilder) Build(t Target, w Watcher) (NamingService, error) {
	w.Update(parseEntries(context.Background(), lookupHost, t.URL, strings.Split(t.Name, ",")))
	return staticService{}, nil
}
