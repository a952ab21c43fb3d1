package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWarnIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)

	l := New(50 * time.Millisecond)
	for range 1000 {
		l.Warn("bad peer", "n", 1)
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "bad peer"), "a flood writes one line")
	time.Sleep(60 * time.Millisecond)
	l.Warn("bad peer")
	assert.Equal(t, 2, strings.Count(buf.String(), "bad peer"))
	assert.Contains(t, buf.String(), "suppressed=999", "the next line counts what was dropped")
}
