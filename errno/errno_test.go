package errno_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gobrpc/gobrpc/errno"
)

func TestTextIsBrpcs(t *testing.T) {
	assert.Equal(t, "[E1008]Reached timeout=5ms", errno.Text(errno.ERPCTIMEDOUT, "Reached timeout=5ms"))
	assert.Equal(t, "[a][E1002]x", string(errno.AppendText([]byte("[a]"), errno.ENOMETHOD, "x")))
	e := errno.New(errno.ELIMIT, "busy")
	assert.Equal(t, "[E2004]busy", e.Error())
	assert.Equal(t, "[E1004]Authentication failed", (&errno.Error{Code: errno.ERPCAUTH}).Error())
}

func TestContextErrorsMatch(t *testing.T) {
	timedOut := error(&errno.Error{Code: errno.ERPCTIMEDOUT, Text: "[E1008]Reached timeout=1ms"})
	assert.ErrorIs(t, timedOut, context.DeadlineExceeded)
	assert.ErrorIs(t, timedOut, errno.ERPCTIMEDOUT)
	assert.NotErrorIs(t, timedOut, context.Canceled)
	canceled := fmt.Errorf("call: %w", errno.New(errno.ECANCELED, "RPC was canceled"))
	assert.ErrorIs(t, canceled, context.Canceled)
	assert.NotErrorIs(t, canceled, context.DeadlineExceeded)
	// A connect timeout is no deadline of the call.
	assert.NotErrorIs(t, errno.New(errno.ETIMEDOUT, "connect"), context.DeadlineExceeded)
}

func TestCodeOf(t *testing.T) {
	assert.Equal(t, errno.Errno(0), errno.CodeOf(nil))
	assert.Equal(t, errno.ELIMIT, errno.CodeOf(fmt.Errorf("x: %w", errno.New(errno.ELIMIT, "busy"))))
	assert.Equal(t, errno.EPERM, errno.CodeOf(errno.EPERM))
	assert.Equal(t, errno.ERPCTIMEDOUT, errno.CodeOf(context.DeadlineExceeded))
	assert.Equal(t, errno.ECANCELED, errno.CodeOf(fmt.Errorf("y: %w", context.Canceled)))
	assert.Equal(t, errno.EINTERNAL, errno.CodeOf(errors.New("other")))
}
