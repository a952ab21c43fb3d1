package builtin

import (
	"flag"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/flags"
)

// Test flags: a reloadable one, a fixed one and a plain Go flag.
var (
	testReloadable = flags.DefineInt64("bt_flag_reloadable", 5, "a reloadable test flag", flags.Positive[int64])
	testPassword   = flags.DefineSecret("btsecret_password", "a secret test flag")
	testFixed      = flags.DefineInt64("bt_flag_fixed", 7, "a fixed test flag", nil)
	testGoFlag     = flag.String("bt_flag_goflag", "x<y", "a Go flag")
)

func TestFlagsListing(t *testing.T) {
	h := newHarness(t, Options{AllowSetFlags: true})
	require.NoError(t, testReloadable.SetValue(9))
	defer testReloadable.SetValue(5)

	r := h.get("/flags/bt_flag_*", curlUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "Name | Value | Description | Defined At\n"+
		"---------------------------------------\n"+
		"bt_flag_fixed | 7 | a fixed test flag | gobrpc\n"+
		"bt_flag_goflag | x<y | a Go flag | flag.CommandLine\n"+
		"bt_flag_reloadable (R) | 9 (default:5) | a reloadable test flag | gobrpc\n", r.body)

	// Exact names (sorted, unknown ones skipped), mixed with a wildcard.
	r = h.get("/flags/bt_flag_reloadable,bt_flag_fixed;no_such_flag", curlUA)
	assert.Equal(t, 4, strings.Count(r.body, "\n"), r.body)
	assert.Contains(t, r.body, "---\nbt_flag_fixed | 7 |")
	r = h.get("/flags/bt_flag_goflag,bt_flag_re$oadable", curlUA)
	assert.Equal(t, 4, strings.Count(r.body, "\n"), r.body)

	// Everything: gobrpc's flags and Go's (the testing package's too).
	all := h.get("/flags", noUA).body
	assert.Contains(t, all, "\nmax_body_size | 67108864 | ")
	assert.Contains(t, all, "\ntest.v | ")
	assert.Contains(t, all, "\nbt_flag_goflag | ")

	// HTML: a table, the non-default value in red, an (R) link to the form.
	page := h.get("/flags/bt_flag_*", browserUA).body
	assert.Contains(t, page, `<th>Name</th><th>Value</th><th>Description</th><th>Defined At</th>`)
	assert.Contains(t, page, `<td>bt_flag_reloadable (<a href="/flags/bt_flag_reloadable?setvalue&amp;withform">R</a>)</td>`+
		`<td><span class="nondefault">9 (default:5)</span></td>`)
	assert.Contains(t, page, `<td>bt_flag_fixed</td><td>7</td>`)
	assert.Contains(t, page, `<td>x&lt;y</td>`, "escaped")
}

func TestFlagsSetValue(t *testing.T) {
	defer testReloadable.SetValue(5)
	defer flag.Set("bt_flag_goflag", "x<y")
	cases := []struct {
		name   string
		allow  bool
		path   string
		status int
		body   string
	}{
		{"no name", true, "/flags?setvalue=1", 404, "[E1002]Require gflag name"},
		{"no name, trailing slash", true, "/flags/?setvalue=1", 404, "[E1002]Require gflag name"},
		{"unknown flag", true, "/flags/bt_flag_nothing?setvalue=1", 404, "[E1002]No such gflag"},
		{"not reloadable", true, "/flags/bt_flag_fixed?setvalue=8", 403, "[E1]A reloadable gflag must have validator"},
		{"a Go flag is not reloadable", true, "/flags/bt_flag_goflag?setvalue=z", 403, "[E1]A reloadable gflag must have validator"},
		{"refused by the validator", true, "/flags/bt_flag_reloadable?setvalue=-3", 403, "[E1]Fail to set `bt_flag_reloadable' to -3"},
		{"refused by the parser", true, "/flags/bt_flag_reloadable?setvalue=abc", 403, "[E1]Fail to set `bt_flag_reloadable' to abc"},
		{"empty value", true, "/flags/bt_flag_reloadable?setvalue=", 403, "[E1]Fail to set `bt_flag_reloadable' to empty string"},
		{"not on this port", false, "/flags/bt_flag_reloadable?setvalue=11", 403,
			"[E1]Cannot modify `bt_flag_reloadable' on this port: use the server's internal port"},
		{"set", true, "/flags/bt_flag_reloadable?setvalue=12", 200, "Set `bt_flag_reloadable' to 12"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Options{AllowSetFlags: c.allow})
			before := testReloadable.Get()
			r := h.get(c.path, curlUA)
			assert.Equal(t, c.status, r.status)
			assert.Equal(t, c.body, r.body)
			if c.status == 200 {
				assert.Equal(t, int64(12), testReloadable.Get())
				assert.Contains(t, h.get("/flags/bt_flag_reloadable", curlUA).body, "| 12 (default:5) |")
			} else {
				assert.Equal(t, before, testReloadable.Get(), "unchanged")
				assert.Equal(t, "7", testFixed.String())
				assert.Equal(t, "x<y", *testGoFlag)
			}
		})
	}
}

func TestFlagsSetValueForm(t *testing.T) {
	h := newHarness(t, Options{AllowSetFlags: true})
	r := h.get("/flags/bt_flag_reloadable?setvalue&withform", browserUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.body, `<input name="setvalue"`)
	assert.Equal(t, int64(5), testReloadable.Get(), "the form changes nothing")

	defer testReloadable.SetValue(5)
	r = h.get("/flags/bt_flag_reloadable?setvalue=6", browserUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "Set `bt_flag_reloadable' to 6<br><a href='/flags'>[back to flags]</a>", r.body)
}

// /pprof/cmdline shows the command line, but never a secret flag's value,
// in any of the forms the flag package takes.
func TestPprofCmdlineHidesSecrets(t *testing.T) {
	h := newHarness(t, Options{})
	oldArgs := os.Args
	defer func() { os.Args = oldArgs }()
	os.Args = []string{"server", "-btsecret_password=hunter2", "--btsecret_password", "hunter3",
		"-bt_flag_reloadable=6", "--btsecret_password=hunter4", "-btsecret_password", "hunter5", "arg"}
	got := h.get("/pprof/cmdline", curlUA)
	assert.Equal(t, http.StatusOK, got.status)
	assert.NotContains(t, got.body, "hunter")
	assert.Equal(t, strings.Join([]string{"server", "-btsecret_password=<hidden>", "--btsecret_password", "<hidden>",
		"-bt_flag_reloadable=6", "--btsecret_password=<hidden>", "-btsecret_password", "<hidden>", "arg"}, "\x00"), got.body)
}
