package flags_test

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/flags"
)

// Flags are defined once per process, as in a program: a test that ran
// twice (go test -count=2) must not define them again.
var (
	testReloadable = flags.DefineInt32("test_reloadable_int", 5, "a test flag", flags.Positive[int32])
	testFixed      = flags.DefineFloat64("test_fixed_float", 0.5, "a fixed test flag", nil)
	testString     = flags.DefineString("test_string", "a", "a string flag", nil)
	testSecret     = flags.DefineSecret("test_secret", "a password")
	testBool       = flags.DefineBool("test_bool", true, "a bool flag", nil)
)

func TestFlagsOnCommandLine(t *testing.T) {
	f, g := testReloadable, testFixed
	require.NoError(t, f.SetValue(5))
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
	s, p := testString, testSecret
	require.NoError(t, flag.CommandLine.Set("test_string", "b c"))
	assert.Equal(t, "b c", s.Get())
	assert.Equal(t, "b c", s.String())
	assert.False(t, s.Reloadable())

	require.NoError(t, p.Set(""))
	assert.Equal(t, "", p.String(), "unset: nothing to hide")
	require.NoError(t, flag.CommandLine.Set("test_secret", "hunter2"))
	assert.Equal(t, "hunter2", p.Get())
	assert.Equal(t, "<hidden>", p.String(), "/flags and -help must not show it")
	v, ok := flags.Lookup("test_secret")
	require.True(t, ok)
	assert.Equal(t, "<hidden>", v.String())
	assert.True(t, v.Secret())
	assert.False(t, v.Reloadable(), "/flags cannot set it")
}

// -help prints every flag with its default, as Go's flag package does for
// its own types (it calls String on a zero Flag to tell defaults apart).
func TestHelpPrintsDefaults(t *testing.T) {
	var out bytes.Buffer
	fs := flag.CommandLine
	old := fs.Output()
	fs.SetOutput(&out)
	defer fs.SetOutput(old)
	fs.PrintDefaults()
	help := out.String()
	assert.NotContains(t, help, "panic calling String")
	assert.Contains(t, help, "a test flag (default 5)")
	assert.Contains(t, help, "a fixed test flag (default 0.5)")
	assert.Contains(t, help, "a string flag (default a)")
	assert.Contains(t, help, "a bool flag (default true)")
	assert.Contains(t, help, "(default 67108864)", "max_body_size")
	assert.NotContains(t, help, "hunter2")
}

// A bad value is reported once, with the flag's name and value once.
func TestFlagErrorsSayItOnce(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	fs.Var(testReloadable, "x", "")
	for arg, reason := range map[string]string{
		"-x=2x":                   "parse error",
		"-x=-2":                   "must be positive",
		"-x=99999999999999999999": "value out of range",
	} {
		err := fs.Parse([]string{arg})
		require.Error(t, err)
		value := strings.TrimPrefix(arg, "-x=")
		assert.Equal(t, `invalid value "`+value+`" for flag -x: `+reason, err.Error())
	}
	err := testReloadable.SetValue(-3)
	require.Error(t, err)
	assert.Equal(t, "invalid value -3 for flag -test_reloadable_int: must be positive", err.Error())
}
