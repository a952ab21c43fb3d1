package flags_test

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/flags"
)

func TestFlagsOnCommandLine(t *testing.T) {
	f := flags.DefineInt32("test_reloadable_int", 5, "a test flag", flags.Positive[int32])
	g := flags.DefineFloat64("test_fixed_float", 0.5, "a fixed test flag", nil)
	require.NoError(t, flag.CommandLine.Set("test_reloadable_int", "7"))
	assert.Equal(t, int32(7), f.Get())
	assert.Error(t, flag.CommandLine.Set("test_reloadable_int", "-1"), "the validator refuses")
	assert.Equal(t, int32(7), f.Get(), "a refused value changes nothing")
	assert.Error(t, f.Set("seven"))
	assert.True(t, f.Reloadable())
	assert.False(t, g.Reloadable())
	assert.Equal(t, "5", f.DefaultString())

	v, ok := flags.Lookup("max_body_size")
	require.True(t, ok)
	assert.Equal(t, "67108864", v.String())
	names := []string{}
	for _, v := range flags.All() {
		names = append(names, v.Name())
	}
	assert.IsIncreasing(t, names)
}

func TestStringAndSecretFlags(t *testing.T) {
	s := flags.DefineString("test_string", "a", "a string flag", nil)
	require.NoError(t, flag.CommandLine.Set("test_string", "b c"))
	assert.Equal(t, "b c", s.Get())
	assert.Equal(t, "b c", s.String())
	assert.False(t, s.Reloadable())

	p := flags.DefineSecret("test_secret", "a password")
	assert.Equal(t, "", p.String(), "unset: nothing to hide")
	require.NoError(t, flag.CommandLine.Set("test_secret", "hunter2"))
	assert.Equal(t, "hunter2", p.Get())
	assert.Equal(t, "<hidden>", p.String(), "/flags and -help must not show it")
	v, ok := flags.Lookup("test_secret")
	require.True(t, ok)
	assert.Equal(t, "<hidden>", v.String())
	assert.False(t, v.Reloadable(), "/flags cannot set it")
}
